"""Notebook 04 finishes a run in which no step trains, and says why it has no weights to show.

A step whose groups are all degenerate is skipped. With two groups of two that happens about
one step in four, and once, under load (which changes Sail's random draws), both steps of a
sweep test's two-step run skipped: the importance-weight gap came out NaN and the local check
failed with "the local Sail and Tinker disagree about the logprobs". Here every step skips by
construction: a one-token completion never holds a boxed answer, so every rollout of a group
gets the same reward.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from tests.notebook_support import assert_clean_local_run, finish, papermill

RUN_NAME = "no-step-trains"
PARAMETERS = {
    "steps": 2,
    "group_size": 2,
    "groups_per_step": 2,
    "max_tokens": 1,
    "eval_problems": 4,
    "eval_samples": 1,
    "run_name": RUN_NAME,
}


def test_a_run_with_only_degenerate_steps_finishes_and_says_so(
    run_env: dict, tmp_path: Path
) -> None:
    out = tmp_path / "04.ipynb"
    code, log = finish(papermill("04_training_loop.ipynb", out, PARAMETERS, run_env))
    assert code == 0, log[-3000:]
    assert_clean_local_run(out, run_env, tmp_path, log)
    metrics = (tmp_path / "runs" / RUN_NAME / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["skipped"] for line in metrics] == [True, True]
    executed = nbformat.read(out, as_version=4)
    [summary] = [c for c in executed.cells if "diagnostics = [" in c.source]
    [sentence] = [o["data"]["text/markdown"] for o in summary.outputs if "data" in o]
    assert sentence.startswith("No step trained") and "nan" not in sentence
