"""Every "Try this" of notebooks 03, 08 and 09, and 05's interrupted sweep, done as the bullet
says, with small parameters, and checked for the change the bullet announces.

(Those of notebooks 01, 02 and 04 are in tests/notebooks/test_results.py, 05's others in
tests/long/test_try_this_06.py.) Each run sets the
parameters a bullet names, or makes the edit it describes in the cell it names, and gets a
last cell that prints what the test reads as JSON (`tests.notebook_support.probe`). One run
checks several bullets where they touch different cells. A bullet that needs cloud keys is
run on the cloud path against the local stack by the test named beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from local_stack.client.supervisor import stop_local_stack
from tests.notebook_support import (
    ROOT,
    assert_no_key_leaks,
    error_outputs,
    kernel_env,
    printed,
    probe,
    run,
    small,
    succeeded,
    with_probe,
)
from tests.sweep_support import SWEEP, TINY
from tests.wait_support import wait_until


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """Folders whose runs/ and local-stack storage the runs of this module use; every stack
    their kernels started is stopped at the end (stacks outlive their kernels)."""
    used: list[Path] = []
    yield used
    for folder in used:
        stop_local_stack(folder / "stack")


def folder_for(folders: list[Path], tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    folder = tmp_path_factory.mktemp(name)
    folders.append(folder)
    return folder


# -- 03_one_grpo_step ----------------------------------------------------------------------

NOTEBOOK_03 = "03_one_grpo_step.ipynb"
PROBE_03 = """{
    "weights": [float(weights.min()), float(weights.max())],
    "kl_before": kl_before,
    "kl_after": kl_after,
    "gap": gap / scale,
    "means": [float(mean_positive), float(mean_negative)],
    "shown_advantage": advantage_D[shown],
    "advantages": [min(advantage_D), max(advantage_D)],
    "trained_advantages": sorted(set(table.loc[table["mask"] > 0, "advantage"])),
    "columns": list(table.columns),
    "prompts": sorted(
        {course.tokenizer.decode(g.trajectories_G[0].transitions[0].ob.to_ints())
         for g in trajectory_groups}
    ),
}"""


def run_03(folders, factory, name: str, parameters: dict, edits=()) -> tuple[dict, str]:
    """Notebook 03 in a folder and a local stack of its own: what the probe printed, and
    papermill's log with the executed notebook (for the leak check)."""
    folder = folder_for(folders, factory, name)
    notebook = with_probe(NOTEBOOK_03, folder, PROBE_03, list(edits))
    executed = succeeded(run(notebook, folder / "out.ipynb", parameters, kernel_env(folder)))
    assert not error_outputs(executed)
    return probe(executed), executed.metadata["log"] + (folder / "out.ipynb").read_text()


# The bullet's edit: in the cell that picks `shown`, `max` becomes `min`.
MIN_EDIT = ("shown = max(range(len(data_D))", "shown = max(", "shown = min(")


@pytest.fixture(scope="module")
def default_03(folders, tmp_path_factory) -> dict:
    """The default settings, with the `max` -> `min` bullet's edit: it changes only which datum
    the table shows, so every number the other bullets compare against is the default run's."""
    return run_03(folders, tmp_path_factory, "03-default", {}, [MIN_EDIT])[0]


def test_03_temperature_07_moves_the_weights_off_1_and_the_kl_jumps(
    default_03: dict, folders, tmp_path_factory
) -> None:
    """Try this: `temperature = 0.7`."""
    cold, _ = run_03(folders, tmp_path_factory, "03-temperature", {"temperature": 0.7})

    def farthest(seen: dict) -> float:
        low, high = seen["weights"]
        return max(high - 1, 1 - low)

    assert farthest(default_03) < 1e-4 < 1e-2 < farthest(cold)  # "leave 1"
    for name in ("optim/kl_sample_train_v1", "optim/kl_sample_train_v2"):
        assert abs(cold["kl_before"][name]) > 1000 * abs(default_03["kl_before"][name]), name
    assert cold["gap"] <= 1e-4  # the loss by hand still matches Tinker's (the notebook asserts)


def test_03_learning_rate_3e4_moves_both_sides_further_and_the_kl_grows(
    default_03: dict, folders, tmp_path_factory
) -> None:
    """Try this: `learning_rate = 3e-4`, the notebook otherwise unchanged."""
    seen, _ = run_03(folders, tmp_path_factory, "03-lr", {"learning_rate": 3e-4})
    (up, down), (default_up, default_down) = seen["means"], default_03["means"]
    assert up > default_up > 0 > default_down > down
    name = "optim/kl_sample_train_v2"
    assert seen["kl_after"][name] > default_03["kl_after"][name]
    # Unedited, the cell that picks `shown` shows the datum with the largest advantage.
    assert seen["shown_advantage"] == seen["advantages"][1] > 0


def test_03_min_instead_of_max_shows_a_negative_advantage(default_03: dict) -> None:
    """Try this: `max` -> `min` in the cell that picks `shown`, at the default settings. The
    shown datum is the most negative one, and its trained positions carry that advantage.
    Structural, not a matter of the seed: the notebook trains only on a draw with a group
    whose rewards differ, and such a group has a member below its mean."""
    assert default_03["shown_advantage"] == default_03["advantages"][0] < 0
    assert default_03["trained_advantages"] == [pytest.approx(default_03["shown_advantage"])]
    assert "advantage" in default_03["columns"]


def test_03_seed_1_draws_other_problems_and_every_check_holds(
    default_03: dict, folders, tmp_path_factory
) -> None:
    """Try this: `seed = 1`. The run succeeding means every assertion in it held."""
    seen, text = run_03(folders, tmp_path_factory, "03-seed-1", {"seed": 1})
    assert not set(seen["prompts"]) & set(default_03["prompts"])
    assert "bit for bit, in all 16 groups" in text and "PEFT agrees" in text
    assert_no_key_leaks(text)


# -- 06_compare_runs -------------------------------------------------------------------------

# Three runs, so that "halfway" falls inside the second (the sweep of 05's first bullet).
SWEEP_ARGS = ["-p", "seed", "0", "1", "2", "--name", "seeds3"]
# Small: one learning rate (so three runs) at the rehearsal's three steps of two groups of two.
SMALL_SWEEP = TINY
SEEDS3 = ["seeds3-seed0", "seeds3-seed1", "seeds3-seed2"]


def sweep(env: dict) -> subprocess.Popen:
    """`make sweep SWEEP="..."` runs `python -m sweeps.runner ...`; in a session of its own, as a
    terminal runs a foreground job, so that Ctrl-C's SIGINT can go to all of it."""
    return subprocess.Popen(
        [*SWEEP, *SWEEP_ARGS, *SMALL_SWEEP], env=env, cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def interrupted_sweep(folders, tmp_path_factory) -> tuple[Path, str, str]:
    """Try this: interrupt `make sweep` with Ctrl-C halfway, then run it again. The folder,
    and what the interrupted and the second sweep printed."""
    folder = folder_for(folders, tmp_path_factory, "seeds3")
    env = kernel_env(folder)
    first = sweep(env)
    second_run = folder / "runs" / SEEDS3[1] / "state.json"

    def second_started() -> bool:
        return second_run.exists() and json.loads(second_run.read_text())["completed_steps"]

    wait_until(lambda: second_started() or first.poll() is not None, "the second run", 600, 0.05)
    assert second_started(), first.stdout.read()
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: SIGINT to the terminal's foreground group
    interrupted, _ = first.communicate(timeout=120)
    assert first.returncode == 130, interrupted
    again = sweep(env)
    resumed, _ = again.communicate(timeout=900)
    assert again.returncode == 0, resumed
    return folder, interrupted, resumed


def test_05_ctrl_c_then_again_runs_only_the_unfinished_runs(interrupted_sweep) -> None:
    folder, interrupted, resumed = interrupted_sweep
    assert f"interrupted: run the same command again to resume {SEEDS3[1]}, {SEEDS3[2]}" in (
        interrupted
    )
    assert f"{SEEDS3[0]}: finished earlier, not run again" in resumed
    assert f"{SEEDS3[0]}: started" not in resumed
    assert f"{SEEDS3[1]}: started, resuming after step" in resumed
    assert f"{SEEDS3[2]}: started" in resumed and "done: 3 finished, 0 failed" in resumed
    for name in SEEDS3:
        state = json.loads((folder / "runs" / name / "state.json").read_text())
        assert state["completed_steps"] == 3 and state["eval_after"]


# -- 08_sandboxed_rollouts -------------------------------------------------------------------

NOTEBOOK_07 = "08_sandboxed_rollouts.ipynb"
SLOW_REPLY = "</think>```bash\\nsleep 30; awk '{s += $1} END {print s}' numbers.txt > sum.txt\\n```"
PLANTED = (
    "wc -l < numbers.txt > sum.txt; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
    " chmod 444 /logs/verifier/reward.txt"
)
HARBOR = "tinker_cookbook.recipes.harbor_rl.harbor_tools"
BY_HARBOR_REWARD = "lambda box: HarborReward(task.tests_dir, box)([])"
NEW_ROWS = f"""
    "fake the grade": (TAMPER, 5, graded),
    "planted reward, run_verifier": ({PLANTED!r}, 5, graded),
    "planted reward, HarborReward": ({PLANTED!r}, 5, {BY_HARBOR_REWARD}),
    "cat /etc/shadow": ("cat /etc/shadow", 5, None),
    "kill -9 1": ("kill -9 1", 5, None),
}}"""
PROBE_07 = """{
    "rollouts": [
        [t.transitions[0].logs.get("script"), t.transitions[0].metrics.get("command_exit_code"),
         t.transitions[0].logs["verifier"], reward]
        for t, reward in zip(group.trajectories_G, group.get_total_rewards(), strict=True)
    ],
    "timings": timings,
    "containment": json.loads(containment.to_json(orient="index")),
    "metrics": [json.loads(line) for line in run.metrics_path.read_text().splitlines()],
}"""
# The training section at its small sizes, but for group_size (the rollout cell's bullet needs
# a full group): the bullets do not touch it, but it runs.
SMALL_TRAINING_07 = {k: v for k, v in small(NOTEBOOK_07).items() if k != "group_size"}


@pytest.fixture(scope="module")
def edited_07(folders, tmp_path_factory) -> tuple[nbformat.NotebookNode, dict]:
    """All five bullets in one run: they change different cells. A slow reply and
    `command_timeout=5` (the rollout cell); `simulated_boot_seconds = 2` (the creation
    cell); two planted-reward rows, one per grader, and `cat /etc/shadow` and `kill -9 1`
    rows (the containment cell); and `metrics.jsonl`, read back (the probe)."""
    folder = folder_for(folders, tmp_path_factory, "07")
    edits = [
        ("SCRIPTED_REPLIES = [", '1000.",\n]', f'1000.",\n    "{SLOW_REPLY}",\n]'),
        ("builder = ShellTaskGroupBuilder(", "command_timeout=20", "command_timeout=5"),
        (
            "escapes = {",
            "# @needs_sandbox\n",
            f"# @needs_sandbox\nfrom {HARBOR} import HarborReward\n",
        ),
        ("escapes = {", '"fake the grade": (TAMPER, 5, graded),\n}', NEW_ROWS.lstrip("\n")),
    ]
    notebook = with_probe(NOTEBOOK_07, folder, PROBE_07, edits)
    parameters = {"simulated_boot_seconds": 2, **SMALL_TRAINING_07}
    executed = succeeded(run(notebook, folder / "out.ipynb", parameters, kernel_env(folder)))
    assert not error_outputs(executed)
    return executed, probe(executed)


def test_07_a_correct_but_slow_script_is_killed_at_command_timeout_and_earns_0(edited_07) -> None:
    rollouts = edited_07[1]["rollouts"]
    assert len(rollouts) == 8
    slow = [r for r in rollouts if (r[0] or "").startswith("sleep 30")]
    assert len(slow) == 1, "the bullet says seed 0 draws the slow reply once in 8 rollouts"
    for _, exit_code, verifier, reward in slow:
        assert exit_code == 124 and reward == 0.0  # killed at its timeout, before writing
        assert verifier == "not graded: the script ran past 5 s"


def test_07_a_planted_reward_fools_harbor_reward_and_not_run_verifier(edited_07) -> None:
    rows = edited_07[1]["containment"]
    assert rows["planted reward, run_verifier"]["afterwards"] == "graded reward 0.0"
    assert rows["planted reward, HarborReward"]["afterwards"][0] == 1.0


def test_07_two_second_boots_cost_8_boots_one_after_another(edited_07) -> None:
    executed, seen = edited_07
    text = printed(executed, "for creation in (")
    for creation in ("sequential", "concurrent"):
        assert f"{creation:10s}: 8 sandboxes ready in" in text
    # One boot after another: at least 8 boots (the notebook asserts this lower bound too);
    # together, the group waits for about one, so concurrent creation wins by far.
    assert seen["timings"]["sequential"] >= 8 * 2
    assert seen["timings"]["concurrent"] < seen["timings"]["sequential"] / 2


def test_07_metrics_jsonl_has_a_line_per_step_with_reward_and_bash_block_rates(edited_07) -> None:
    metrics = edited_07[1]["metrics"]
    assert [m["step"] for m in metrics] == list(range(SMALL_TRAINING_07["steps"]))
    for m in metrics:
        assert 0 <= m["has_bash_block"] <= 1 and 0 <= m["reward"] <= 1


def test_07_reading_etc_shadow_fails_and_kill_9_1_does_nothing(edited_07) -> None:
    rows = edited_07[1]["containment"]
    shadow, kill = rows["cat /etc/shadow"], rows["kill -9 1"]
    assert shadow["exit code"] == 1 and "Permission denied" in shadow["stderr (telling line)"]
    assert kill["exit code"] == 0 and kill["stderr (telling line)"] == ""  # not even an error


# -- 09_ship_the_adapter ---------------------------------------------------------------------

NOTEBOOK_08 = "09_ship_the_adapter.ipynb"


def test_08_a_lora_name_with_capitals_stops_in_the_check_cell(folders, tmp_path_factory) -> None:
    """Try this: `lora_name = "Course_Adapter"`."""
    folder = folder_for(folders, tmp_path_factory, "08-name")
    executed = run(
        NOTEBOOK_08, folder / "out.ipynb", {"lora_name": "Course_Adapter"}, kernel_env(folder)
    )
    assert executed.metadata["exit_code"] != 0
    [(cell, error)] = [
        (c, o) for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert "helpers.settings(" in cell.source  # the first cell after the parameters
    assert error.ename == "CourseConfigError" and len(error.traceback) == 1
    assert "2-64 characters of a-z, 0-9 and '-'" in error.evalue
    assert error.evalue.count(". ") == 0 and error.evalue.endswith(".")  # one sentence
    assert not (folder / "stack").exists()  # it stopped before connecting
