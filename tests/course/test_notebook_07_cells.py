"""Notebook 07's scripted policy and its five-seed summary: the slow reply is drawn exactly
once at the default group size, and the summary was measured at the notebook's own defaults
by the script it names."""

from __future__ import annotations

import importlib.util
import random
import re
import sys

from helpers.notebook_parameters import NOTEBOOK_PARAMETERS
from tests.notebook_source import ROOT, cells

NOTEBOOK = "07_sandboxed_rollouts"


def test_the_slow_reply_is_drawn_once_at_the_default_group_size() -> None:
    """ScriptedShellPolicy draws with `random.Random(seed).choice`, one draw per rollout, in
    order: with the appended fifth reply, seed 0 draws it exactly once in a default group."""
    group_size = NOTEBOOK_PARAMETERS[NOTEBOOK]["group_size"].value
    [policy_cell] = [c for c in cells(NOTEBOOK) if "SCRIPTED_REPLIES = [" in c.source]
    assert "ScriptedShellPolicy(SCRIPTED_REPLIES, course.tokenizer, seed=0)" in policy_cell.source
    replies = policy_cell.source.count('"</think>')  # each reply opens with </think>
    rng = random.Random(0)
    draws = [rng.choice(range(replies + 1)) for _ in range(group_size)]
    assert draws.count(replies) == 1, draws  # the fifth reply, appended last


def test_the_five_seed_summary_was_measured_at_the_notebooks_defaults() -> None:
    [cell] = [c for c in cells(NOTEBOOK) if c.get("id") == "seeds-rendered"]
    namespace: dict = {}
    exec(cell.source.split("table = [", 1)[0], namespace)  # the constants, not the rendering
    measured, by_seed = namespace["SEEDS_MEASURED"], namespace["BY_SEED"]
    assert len(by_seed) >= 5
    assert re.search(r"on 20\d\d-\d\d-\d\d", measured)
    command = re.match(r"scripts/train_shell_policy\.py --steps (\d+) --seeds ([\d ]+),", measured)
    assert command and [int(s) for s in command[2].split()] == list(by_seed)
    declared = NOTEBOOK_PARAMETERS[NOTEBOOK]
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
