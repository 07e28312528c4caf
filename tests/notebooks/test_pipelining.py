"""Notebook 07 on both backends (its `train_latency` knob is tested in
tests/stack/test_train_latency_knob.py).

The notebook runs under papermill on the local backend, and on the cloud code path against a
local stack server, as `test_cloud_path` does for notebook 04's loop. No test here asserts
a wall-clock duration: the notebook reports its timing against the predictions, and
`make bench` measures it.

Its one local run here is its solved run (`make solutions`' copy, small sizes, on the
session's stack), and three tests read it: every exercise's check passes; the schedules'
staleness, timing lines and tables it writes to its run folder; and whose the simulated
latencies were while it ran (its kernel's only) and after (nobody's). The per-client
settings themselves: tests/stack/test_kernel_settings.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from helpers.notebook_parameters import NOTEBOOK_PARAMETERS
from local_stack import config, registry
from local_stack.client.control_client import get_knobs, get_stats
from local_stack.client.supervisor import LocalStack
from tests.cloud_support import cloud_kernel_env
from tests.knobs_support import config_of, stack_default
from tests.notebook_support import (
    all_text_under,
    assert_every_check_passes,
    assert_no_key_leaks,
    finish,
    kernel_env,
    papermill,
    printed_text,
    run_table,
    small,
    solved_copy,
)
from tests.wait_support import wait_until

NOTEBOOK = "07_faster_loops.ipynb"
HANG_SECONDS = 120.0  # a bound against a hang only, never a claim about speed


# Small enough to run in a little over a minute.
SMALL = small(NOTEBOOK, run_name="papermill-small")
STALENESS_CHECKED = "checked: every batch was exactly as stale as its schedule says"
# The two simulated latencies of the small run, which differ, so that the settings test can
# see the kernel use each.
SIMULATED = {
    NOTEBOOK_PARAMETERS[NOTEBOOK.removesuffix(".ipynb")]["balanced_latency_s"].value,
    SMALL["flex_latency_s"],
}


@dataclass
class SolvedRun:
    """The solved notebook's small run: where it wrote, what it printed, and what the stack
    said of the clients' settings while it ran and once its kernel had shut down."""

    out: Path
    runs: Path
    log: str
    kernel_latencies: set[float]  # the latencies the stack applied to the run's kernel
    knobs_meanwhile: list[dict]  # this process's own settings, read while it ran
    another_kernel_after: dict  # a client that set nothing, once the kernel was gone
    knobs_after: dict


def kernel_clients(storage_dir: Path) -> set[str]:
    """The clients registered with the stack other than this test process."""
    return registry.live_client_names(storage_dir) - {config.process_client()}


@pytest.fixture(scope="module")
def solved_run(
    local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SolvedRun]:
    """Run the solved notebook 07 on the session's stack, watching the stack's settings."""
    folder = tmp_path_factory.mktemp("solved-06")
    env = kernel_env(folder, COURSE_LOCAL_STACK_DIR=str(local_stack.storage_dir))
    out = folder / NOTEBOOK
    solved = solved_copy(NOTEBOOK.removesuffix(".ipynb"), folder / "solutions")
    run = papermill(str(solved), out, SMALL, env)
    kernel_latencies: set[float] = set()
    knobs_meanwhile = []
    try:
        while run.poll() is None:
            for client in kernel_clients(local_stack.storage_dir):
                kernel_latencies.add(config_of(local_stack.url, client)["latency"])
            knobs_meanwhile.append(get_knobs(local_stack.url))
            time.sleep(0.2)
    finally:
        code, log = finish(run, timeout=HANG_SECONDS)
    assert code == 0, log[-3000:]
    # papermill can return while its kernel is still exiting: wait for the kernel to be gone.
    wait_until(lambda: not kernel_clients(local_stack.storage_dir), "06's kernel to shut down")
    yield SolvedRun(
        out=out,
        runs=folder / "runs",
        log=log,
        kernel_latencies=kernel_latencies,
        knobs_meanwhile=knobs_meanwhile,
        another_kernel_after=config_of(local_stack.url, "anotherkernel"),
        knobs_after=get_knobs(local_stack.url),
    )


def test_the_solved_notebook_runs_and_every_check_passes(solved_run: SolvedRun) -> None:
    assert_every_check_passes(nbformat.read(solved_run.out, as_version=4), "07_faster_loops")


def test_notebook_runs_with_small_parameters(solved_run: SolvedRun) -> None:
    """Local backend, its own checks. Its timing is reported, not asserted (a loaded machine
    misses any bound): the test reads that each run was as stale as its schedule, that the
    timing lines were rendered, and what the run folder holds."""
    printed = printed_text(nbformat.read(solved_run.out, as_version=4))
    assert STALENESS_CHECKED in printed
    for schedule in ("synchronous", "1 step stale", "2 steps stale"):
        assert f"- **{schedule}**: " in printed  # the rendered measured-against-predicted lines
    assert "Flex with k=2: " in printed
    runs = solved_run.runs / "papermill-small"
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
    assert list(verdicts.index) == [
        "synchronous minus base model",
        "1 step stale minus synchronous",
        "2 steps stale minus synchronous",
    ]
    sides = [
        "above 0" if low > 0 else "below 0" if high < 0 else "includes 0"
        for low, high in zip(verdicts["low"], verdicts["high"], strict=True)
    ]
    assert list(verdicts["interval"]) == sides
    scores = run_table(runs, "scores")
    assert list(scores.index) == ["base model", *schedules]
    rise = scores.loc["synchronous", "reward"] - scores.loc["base model", "reward"]
    assert verdicts.loc["synchronous minus base model", "reward"] == pytest.approx(rise)
    assert_no_key_leaks(solved_run.out.read_text(), solved_run.log, all_text_under(solved_run.runs))


def test_after_notebook_06_another_kernel_gets_the_stacks_defaults(solved_run: SolvedRun) -> None:
    """Notebook 07 shares this session's stack. While it ran, its kernel (and only it) had
    the simulated latency; once the kernel had shut down, nobody had it."""
    assert len(SIMULATED) == 2
    assert SIMULATED <= solved_run.kernel_latencies  # it did simulate, in both windows
    assert solved_run.knobs_meanwhile
    assert all(knobs == stack_default() for knobs in solved_run.knobs_meanwhile)  # untouched
    assert solved_run.another_kernel_after == stack_default()
    assert solved_run.knobs_after == stack_default()


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
