"""Notebook 07's "Try this" exercises, each run as written with small batches: each must show
what the notebook says it shows, read from the tables the notebook writes to its run folder.
Timing is reported by the notebook and measured by `make bench`, never asserted here. The
notebook's own runs on both backends are in tests/notebooks/test_pipelining.py.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pandas as pd
import pytest

from tests.notebook_support import finish, papermill, printed_text, run_table, small

NOTEBOOK = "07_faster_loops.ipynb"


# Try this, with small batches: each test changes only what its exercise says (and the
# batch sizes), so its runs take a minute or two each. Notebook 07's simulated waits are its
# kernel's own (tests/notebooks/test_pipelining.py), so its local runs share the
# session's stack.
SIZES = ("steps", "group_size", "groups_per_step", "train_problems", "eval_samples")
TRY_SMALL = {name: value for name, value in small(NOTEBOOK).items() if name in SIZES}
TRY_SMALL |= {"run_name": "try-this"}


def _run_try_this(changes: dict, env: dict, tmp_path: Path) -> Path:
    """Run the notebook with the exercise's `changes`; its run folder."""
    parameters = {**TRY_SMALL, **changes}
    code, log = finish(papermill(NOTEBOOK, tmp_path / NOTEBOOK, parameters, env))
    assert code == 0, log[-3000:]
    return tmp_path / "runs" / parameters["run_name"]


def test_try_this_shorter_training_predicts_from_its_own_s_and_t(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    """Try this, "set train_latency_s = 0.5": the run goes through, and each schedule's
    prediction is the formula applied to the synchronous run's S and T. Whether 3 steps stale
    is then fastest is timing, which a loaded machine can upset: `python -m bench.pipelining
    --sample-latency 1 --train-latency 0.5` prints it."""
    runs = _run_try_this({"train_latency_s": 0.5}, shared_stack_env, tmp_path)
    table = run_table(runs, "schedules")
    S, T = table.loc["synchronous", "own S (s)"], table.loc["synchronous", "own T (s)"]
    predicted = table["predicted s/step"]
    assert predicted["synchronous"] == pytest.approx(S + T)
    assert predicted["1 step stale"] == pytest.approx(max(S, T))
    assert predicted["3 steps stale"] == pytest.approx(max(S / 3, T))


def test_try_this_six_steps_stale_drifts_further_than_one(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    """Try this, "set max_staleness = 6" (at the default 12 steps): at staleness 6 the
    sampler-learner KL and the spread and largest of the importance weights exceed those at
    staleness 1, and the verdicts compare the 6-stale run with the synchronous one."""
    runs = _run_try_this({"max_staleness": 6, "steps": 12}, shared_stack_env, tmp_path)
    steps = pd.read_csv(runs / "steps.csv")
    one = steps[(steps["run"] == "1 step stale") & (steps["staleness"] == 1)]
    six = steps[(steps["run"] == "6 steps stale") & (steps["staleness"] == 6)]
    assert len(one) == 11 and len(six) == 6
    for column in ("kl", "weight_std", "weight_max"):
        assert six[column].mean() > one[column].mean(), (column, one, six)
    verdicts = run_table(runs, "verdicts")
    assert "6 steps stale minus synchronous" in verdicts.index


def test_try_this_slow_flex_window_says_which_side_waits(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    """Try this, "set flex_latency_s = 5": the flex prediction is max(S_flex / k, T), and the
    rendered sentence names the slower side that the run's own S and T imply (the figures
    themselves are timing, reported and not asserted)."""
    changes = {"flex_latency_s": 5.0, "flex_steps": 5}  # 5 steps: the default, as it runs
    runs = _run_try_this(changes, shared_stack_env, tmp_path)
    flex = run_table(runs, "windows").loc["flex"]
    assert flex["k=3 predicted s/step"] == pytest.approx(max(flex["S (s)"] / 3, flex["T (s)"]))
    printed = printed_text(nbformat.read(tmp_path / NOTEBOOK, as_version=4))
    side = "Sail" if flex["S (s)"] / 3 > flex["T (s)"] else "Tinker"
    assert f"{side} is the slower side" in printed
