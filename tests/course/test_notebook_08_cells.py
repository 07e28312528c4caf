"""Notebook 08's scripted policy and its five-seed summary: the slow reply is drawn exactly
once at the default group size, and the summary was measured at the notebook's own defaults
by the script it names."""

from __future__ import annotations

import random

from helpers.measurements import load_measurement
from helpers.notebook_parameters import NOTEBOOK_PARAMETERS
from tests.notebook_source import cells

NOTEBOOK = "08_sandboxed_rollouts"


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
    """The seeds notebook 08 renders (measurements/shell_policy_seeds.json) ran its local
    defaults, five seeds or more."""
    measured = load_measurement("shell_policy_seeds")
    assert len(measured["by_seed"]) >= 5
    assert measured["script"] == "scripts/train_shell_policy.py"
    declared = NOTEBOOK_PARAMETERS[NOTEBOOK]
    settings = measured["settings"]
    assert settings["steps"] == declared["steps"].local
    assert settings["group_size"] == declared["group_size"].value
    assert settings["groups_per_step"] == declared["groups_per_step"].value
    assert settings["learning_rate"] == declared["learning_rate"].local
    assert settings["max_tokens"] == declared["max_tokens"].local
    assert settings["temperature"] == declared["temperature"].value
    assert settings["held_out_tasks"] == declared["eval_tasks"].local
    assert settings["held_out_samples"] == declared["eval_samples"].local
