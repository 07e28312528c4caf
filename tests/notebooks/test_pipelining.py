"""Notebook 06 on both backends (its `train_latency` knob is tested in
tests/stack/test_train_latency_knob.py).

The notebook runs under papermill on the local backend, and on the cloud code path against a
local stack server, as `test_cloud_path` does for notebook 04's loop. Each of its "Try this"
exercises runs as written, with small batches, and must show what the notebook says it shows;
the numbers come from the tables the notebook writes to its run folder. No test here asserts
a wall-clock duration: the notebook reports its timing against the predictions, and
`make bench` measures it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd

from local_stack.client.control_client import get_knobs, get_stats
from tests.cloud_support import cloud_kernel_env
from tests.notebook_support import (
    all_text_under,
    assert_no_key_leaks,
    finish,
    papermill,
    printed_text,
    run_table,
    small,
)

NOTEBOOK = "06_faster_loops.ipynb"


# Small enough to run in a little over a minute.
SMALL = small(NOTEBOOK, run_name="papermill-small")
STALENESS_CHECKED = "checked: every batch was exactly as stale as its schedule says"


def test_notebook_runs_with_small_parameters(shared_stack_env: dict, tmp_path: Path) -> None:
    """Notebook 06's run in `make test` (see conftest.py): local backend, its own checks.

    Its timing is reported, not asserted (a loaded machine misses any bound): the test reads
    that each run was as stale as its schedule, that the timing lines were rendered, and
    what the run folder holds."""
    out = tmp_path / NOTEBOOK
    code, log = finish(papermill(NOTEBOOK, out, SMALL, shared_stack_env))
    assert code == 0, log[-3000:]
    printed = printed_text(nbformat.read(out, as_version=4))
    assert STALENESS_CHECKED in printed
    for schedule in ("synchronous", "1 step stale", "2 steps stale"):
        assert f"- **{schedule}**: " in printed  # the rendered measured-against-predicted lines
    assert "Flex with k=2: " in printed
    runs = tmp_path / "runs" / "papermill-small"
    assert (runs / "timeline.png").stat().st_size > 0
    steps = pd.read_csv(runs / "steps.csv")
    expected = {"synchronous": 0, "1 step stale": 1, "2 steps stale": 2, "2 steps stale, flex": 2}
    for run, k in expected.items():
        rows = steps[steps["run"] == run]
        assert list(rows["staleness"]) == [min(step, k) for step in rows["step"]], (run, rows)
    assert len(steps) == 3 * 4 + 3
    assert_staleness_drifts_the_weights(
        steps[steps["run"].isin(expected) & ~steps["run"].str.endswith("flex")], k=2
    )
    schedules = ["synchronous", "1 step stale", "2 steps stale"]
    assert list(run_table(runs, "schedules").index) == schedules
    assert list(run_table(runs, "windows").index) == ["balanced", "flex"]
    verdicts = run_table(runs, "verdicts")
    assert set(verdicts["metric"]) == {"reward", "format", "correct_given_format"}
    inside = verdicts["minus synchronous"].abs() <= verdicts["interval ±"]
    assert list(verdicts["verdict"]) == ["consistent" if i else "different" for i in inside]
    assert_no_key_leaks(out.read_text(), log, all_text_under(tmp_path / "runs"))


def assert_staleness_drifts_the_weights(steps: pd.DataFrame, k: int) -> None:
    """What the notebook says about its KL column, read from the steps it wrote: locally, a
    fresh batch's KL is 0 up to float rounding (Sail and Tinker run the same model code on the
    same CPU), a batch sampled before a step that trained has a KL above 0, and, where both
    levels have at least 4 trained steps, staleness k drifts further than staleness 1."""
    trained = steps[steps["datums"] > 0]
    fresh = trained[trained["staleness"] == 0]["kl"]
    assert len(fresh) and fresh.max() < 1e-6, fresh
    after_a_step = [
        row.kl
        for _, run in steps.groupby("run")
        for previous, row in zip(run.iloc[:-1].itertuples(), run.iloc[1:].itertuples(), strict=True)
        if row.staleness == 1 and previous.datums and row.datums
    ]
    assert after_a_step and sum(after_a_step) / len(after_a_step) > 1e-6, after_a_step
    by_staleness = trained.groupby("staleness")["kl"]
    counts, means = by_staleness.count(), by_staleness.mean()
    if min(counts.get(1, 0), counts.get(k, 0)) >= 4:
        assert means[1] < means[k], means


def test_notebook_runs_unchanged_on_the_cloud_path(local_stack, tmp_path: Path) -> None:
    """backend="cloud" against a local stack server: no knob is touched, nothing simulated.

    Also Try this: "Run with backend = "cloud" ... and compare the real S and T with the
    simulated ones". The simulated latencies are set to 30 s here; the S and T the notebook
    reports are the services' own, far below them.
    """
    run_env = cloud_kernel_env(tmp_path)
    knobs_before = get_knobs(local_stack.url)
    simulated = {"balanced_latency_s": 30.0, "flex_latency_s": 30.0, "train_latency_s": 30.0}
    parameters = {**SMALL, **simulated, "backend": "cloud", "max_tokens": 24}
    parameters["run_name"] = "cloud-path"
    requests_before = get_stats(local_stack.url)["requests"]
    out = tmp_path / NOTEBOOK
    code, log = finish(papermill(NOTEBOOK, out, parameters, run_env))
    assert code == 0, log[-3000:]
    assert get_knobs(local_stack.url) == knobs_before
    printed = printed_text(nbformat.read(out, as_version=4))
    # The check cell's estimate counted every rollout Sail sampled (none failed here).
    sampled = get_stats(local_stack.url)["requests"] - requests_before
    assert f"estimate: {sampled:,} rollouts, at most {sampled * 24:,} sampled tokens" in printed
    assert "backend: cloud, nothing simulated" in printed
    assert STALENESS_CHECKED in printed  # staleness is the schedule's, on both backends
    assert "checked: 0 for fresh" not in printed  # a KL of 0 holds for the local stack only
    runs = tmp_path / "runs" / "cloud-path"
    steps = (runs / "steps.csv").read_text().splitlines()
    assert len(steps) == 1 + 3 * 4 + 3
    assert "In the cloud the waits are the services' own" in printed
