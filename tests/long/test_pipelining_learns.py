"""Notebook 07 at its local defaults: its synchronous baseline learns, so that "what staleness
costs" compares the pipelined runs with an effect, not with noise (issue 37). A claim about a
random run, so it is checked here, on the tables and steps the executed notebook wrote to its
run folder, never by a cell of the notebook."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from local_stack.client.supervisor import stop_local_stack
from tests.notebook_support import error_outputs, kernel_env, run, run_table, succeeded

NOTEBOOK = "07_faster_loops.ipynb"
RUN_NAME = "faster-loops"  # the notebook's default run_name


def test_06_at_its_defaults_the_synchronous_baseline_learns(tmp_path: Path) -> None:
    try:
        executed = succeeded(run(NOTEBOOK, tmp_path / "out.ipynb", {}, kernel_env(tmp_path)))
    finally:
        stop_local_stack(tmp_path / "stack")
    assert not error_outputs(executed)
    runs = tmp_path / "runs" / RUN_NAME
    # Scored on the fixed problems it trained on, its final weights beat the base model's.
    rise = run_table(runs, "verdicts").loc["synchronous minus base model"]
    assert rise["reward"] > 0, f"the synchronous run's reward changed by {rise.to_dict()}"
    # And over its run, the reward of its batches rose: last third against first third.
    steps = pd.read_csv(runs / "steps.csv")
    rewards = list(steps[steps["run"] == "synchronous"]["reward"])
    third = max(1, len(rewards) // 3)
    first, last = sum(rewards[:third]) / third, sum(rewards[-third:]) / third
    assert last > first, f"the synchronous run's batch reward went {first:.3f} -> {last:.3f}"
