"""Issue 28's defects in notebooks 06 and 07 that code can check: importance weighting's
direction and order, the read-only-reward trick stated as local-only, the slow-reply
exercise's draw at the default group_size, and the five-seed summary measured at 07's own
defaults by a named, dated script."""

from __future__ import annotations

import importlib.util
import random
import re
import sys
from pathlib import Path

import nbformat

from helpers.notebook_parameters import NOTEBOOK_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]


def cells(name: str) -> list:
    return nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4).cells


def markdown(name: str, *, core: bool = False) -> str:
    return "\n".join(
        c.source
        for c in cells(name)
        if c.cell_type == "markdown" and not (core and "optional" in c.metadata.get("tags", []))
    )


def test_06_says_where_importance_weighting_fails_and_that_it_is_first_order() -> None:
    text = markdown("06_faster_loops")
    assert "current policy would almost never sample" not in text
    assert "favours tokens the *sampler* rarely drew" in text
    assert "first-order correction, not an exact one" in text
    assert "corrects only to first order" in markdown("06_faster_loops", core=True)


def test_07_says_the_read_only_reward_trick_fails_on_a_sailbox() -> None:
    text = markdown("07_sandboxed_rollouts")
    assert 'a file mode binds even the sandbox\'s "root"' in text
    assert "on a Sailbox, root writes through file modes" in text
    assert "why would neither be on a Sailbox?" in cells("07_sandboxed_rollouts")[-1].source


def test_07_slow_reply_is_drawn_once_at_the_default_group_size() -> None:
    """ScriptedShellPolicy draws with `random.Random(seed).choice`, one draw per rollout, in
    order: with the appended fifth reply, seed 0 draws it exactly once in a default group."""
    group_size = NOTEBOOK_PARAMETERS["07_sandboxed_rollouts"]["group_size"].value
    [policy_cell] = [
        c for c in cells("07_sandboxed_rollouts") if "SCRIPTED_REPLIES = [" in c.source
    ]
    assert "ScriptedShellPolicy(SCRIPTED_REPLIES, course.tokenizer, seed=0)" in policy_cell.source
    replies = policy_cell.source.count('"</think>')  # each reply opens with </think>
    rng = random.Random(0)
    draws = [rng.choice(range(replies + 1)) for _ in range(group_size)]
    assert draws.count(replies) == 1, draws  # the fifth reply, appended last
    assert (
        "At the default `group_size`, seed 0 draws it once."
        in cells("07_sandboxed_rollouts")[-1].source
    )


def test_07_five_seed_summary_was_measured_at_the_notebooks_defaults() -> None:
    [cell] = [c for c in cells("07_sandboxed_rollouts") if c.get("id") == "seeds-rendered"]
    assert cell.metadata["jupyter"]["source_hidden"] is True
    namespace: dict = {}
    exec(cell.source.split("table = [", 1)[0], namespace)  # the constants, not the rendering
    measured, by_seed = namespace["SEEDS_MEASURED"], namespace["BY_SEED"]
    assert len(by_seed) >= 5
    assert re.search(r"on 20\d\d-\d\d-\d\d", measured)
    command = re.match(r"scripts/train_shell_policy\.py --steps (\d+) --seeds ([\d ]+),", measured)
    assert command and [int(s) for s in command[2].split()] == list(by_seed)
    declared = NOTEBOOK_PARAMETERS["07_sandboxed_rollouts"]
    spec = importlib.util.spec_from_file_location("tsp", ROOT / "scripts" / "train_shell_policy.py")
    script = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = script  # its dataclass looks its module up
    spec.loader.exec_module(script)
    settings = script.ShellRunSettings(steps=int(command[1]))
    assert settings.steps == declared["steps"].local
    assert settings.group_size == declared["group_size"].value
    assert settings.groups_per_step == declared["groups_per_step"].value
    assert settings.learning_rate == declared["learning_rate"].local
    assert settings.max_tokens == declared["max_tokens"].local
    assert settings.temperature == declared["temperature"].value
    assert settings.held_out_tasks == declared["eval_tasks"].local
    assert settings.held_out_samples == declared["eval_samples"].local
