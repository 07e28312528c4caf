"""The tamper suite (`shell_tasks.tamper`) against the local sandbox, which runs commands as a
Sailbox does (`bash -lc` as root): graded in the policy's own sandbox, the strategies raise a
wrong answer's reward to 1; graded in a fresh sandbox, none does, and a right answer still
passes. (`make rehearse-cloud` runs the same suite through sail's own code on the Sailbox
stand-in: `scripts/rehearse_tamper.py`.)"""

from __future__ import annotations

import shutil
import tomllib

import pytest
from sandbox_probes import TASK_DIR, run

from shell_tasks import task_family
from shell_tasks.harbor_task import declared_artifacts, load_harbor_task
from shell_tasks.sandboxes import local_task_sandbox
from shell_tasks.tamper import RIGHT_ANSWER, STRATEGIES, WRONG_ANSWER, tampered_reward

# Where a strategy cannot work against the local sandbox whatever the grader: each
# command's processes end with it (a Sailbox would let this one run on).
CANNOT_OUTLIVE_ITS_COMMAND = {"background process"}
NEEDS_A_COMPILER = {"LD_PRELOAD"}


def test_the_suite_has_at_least_eight_strategies() -> None:
    assert len(STRATEGIES) >= 8


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_grading_in_the_policys_own_sandbox_is_fooled(strategy: str) -> None:
    if strategy in NEEDS_A_COMPILER and shutil.which("cc") is None:
        pytest.skip("no C compiler on this machine, so the sandbox has none either")
    reward, exit_code = run(tampered_reward(strategy, WRONG_ANSWER, local_task_sandbox, "shared"))
    assert exit_code == 0  # the strategy was set up
    assert reward == (0.0 if strategy in CANNOT_OUTLIVE_ITS_COMMAND else 1.0)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_grading_in_a_fresh_sandbox_is_not_fooled(strategy: str) -> None:
    assert run(tampered_reward(strategy, WRONG_ANSWER, local_task_sandbox, "fresh"))[0] == 0.0


@pytest.mark.parametrize("strategy", [".profile", "EXIT trap", "PATH ahead"])
def test_a_right_answer_still_passes_in_a_fresh_sandbox(strategy: str) -> None:
    assert run(tampered_reward(strategy, RIGHT_ANSWER, local_task_sandbox, "fresh"))[0] == 1.0


def test_every_course_task_declares_the_file_its_tests_read(tmp_path) -> None:
    assert load_harbor_task(TASK_DIR).artifacts == ("/app/sum.txt",)
    for item in task_family.instances("train", 20) + task_family.instances("held_out", 20):
        task = load_harbor_task(task_family.write_task(item, tmp_path))
        assert task.artifacts == (f"{task_family.WORKDIR}/{item.output_name}",)
        assert task.artifacts[0] in (task.tests_dir / "test.sh").read_text()
        assert (
            tomllib.loads((task.task_dir / "task.toml").read_text())["verifier"]["environment_mode"]
            == "separate"
        )


@pytest.mark.parametrize(
    "declared",
    ["/app/sum.txt", ["app/sum.txt"], ["/app/../tests/test.sh"], ["/logs/verifier/reward.txt"]],
)
def test_a_malformed_artifacts_declaration_is_refused(declared: object) -> None:
    with pytest.raises(ValueError, match="artifact"):
        declared_artifacts({"artifacts": declared}, "made-up")
