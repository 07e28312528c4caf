"""`make sweep` and the comparison notebook.

A bad grid value stops the sweep before any run, in one sentence, and a dry run prints what
the grid would spend. The comparison table is checked against fixture runs written here, with
the arithmetic done independently, and the comparison notebook runs on them. A real sweep
runs in CI's cloud rehearsal (`make rehearse-cloud`); one killed mid-way, and one with a run
that fails, in tests/long/test_sweep_killed.py.
"""

from __future__ import annotations

import math
from pathlib import Path

import nbformat
import numpy as np
import pytest

from helpers.notebook_parameters import NOTEBOOK_PARAMETERS, backend_defaults, profile
from helpers.params import HELD_OUT_METRICS
from sweeps.compare import RATIOS, comparison_table, interval_quantile, seed_spread, seeds_needed
from sweeps.runner import NOTEBOOK as RUNNER_NOTEBOOK
from sweeps.runs import find_runs
from tests.notebook_support import papermill
from tests.sweep_support import AFTER, BEFORE, finish, sweep

# -- the grid is checked before anything runs ------------------------------------------------


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        (["-p", "learning_rate", "1e-3", "-1"], "learning_rate must be a number greater than 0"),
        (["-p", "group_size", "64", "-p", "groups_per_step", "65"], "group_size x groups_per_step"),
        (["-p", "lerning_rate", "1e-3"], "lerning_rate is not a parameter of"),
        (["-p", "run_name", "mine"], "run_name is set by the sweep"),
        (["-p", "seed", "1", "1.0"], "two runs of the grid would both be named 'sweep-learning"),
    ],
)
def test_an_invalid_grid_value_fails_before_any_run_in_one_sentence(
    grid: list[str], expected: str, run_env: dict, tmp_path: Path
) -> None:
    code, output = finish(sweep(grid, run_env), timeout=120)  # the timeout catches hangs
    assert code == 2
    [line] = output.splitlines()
    assert line.startswith("sweep not started: ") and expected in line
    assert line.endswith(".") and ". " not in line  # one sentence
    assert not (tmp_path / "runs").exists() and not (tmp_path / "stack").exists()


def test_the_default_grid_is_valid_and_the_cloud_budget_is_printed(run_env: dict) -> None:
    code, output = finish(sweep(["--dry-run"], run_env), timeout=120)
    assert code == 0 and output.count("  sweep-learning_rate") == 6
    assert "budget" not in output
    run_env.update(TINKER_API_KEY="tml-fake-for-the-budget", SAIL_API_KEY="sk_fake")
    code, output = finish(sweep(["--dry-run", "-p", "backend", "cloud"], run_env), timeout=120)
    assert code == 0, output
    # The grid's profile (steps, groups per step, held-out problems) and group_size; what it
    # leaves unset takes the cloud's defaults: samples per held-out problem, max_tokens.
    sized, cloud = profile(RUNNER_NOTEBOOK.stem, "sweep"), backend_defaults("cloud")
    steps, group_size = sized["steps"], NOTEBOOK_PARAMETERS["04_training_loop"]["group_size"].value
    rollouts = steps * group_size * sized["groups_per_step"]
    rollouts += 2 * sized["eval_problems"] * cloud["eval_samples"]
    tokens = rollouts * cloud["max_tokens"]
    assert f"{steps} steps, {rollouts:,} rollouts, at most {tokens:,} sampled" in output
    args = ["--dry-run", "-p", "backend", "cloud", "-p", "steps", "10", "-p", "group_size", "8"]
    args += ["-p", "groups_per_step", "5", "-p", "eval_samples", "2", "-p", "eval_problems", "300"]
    code, output = finish(sweep(args, run_env), timeout=120)
    assert code != 0 and "eval_problems must be a whole number from 1 to 200" in output
    args[-1] = "150"
    code, output = finish(sweep(args, run_env), timeout=120)
    assert code == 0, output
    # Per run: 10 steps of 8 x 5 rollouts; 150 x 2 held-out samples before and after; at most
    # 1024 tokens each, the cloud's default max_tokens.
    rollouts = 10 * 8 * 5 + 2 * 150 * 2
    line = f"  sweep-learning_rate0.0003-seed0: 10 steps, {rollouts:,} rollouts, at most "
    assert f"{line}{rollouts * 1024:,} sampled tokens" in output
    assert f"whole sweep: {6 * rollouts:,} Sail rollouts, at most {6 * rollouts * 1024:,}" in output


# -- the comparison, on fixture runs ------------------------------------------------------------


def expected_gain(after: list[list[float]]) -> tuple[float, float]:
    """The reward gain and its 95% half-width, done the plain way: with the same number of
    samples per problem, the pooled reward is the mean of the problems' mean rewards, and
    the gain's error is that of the mean of the problems' paired differences."""
    differences = np.mean(after, axis=1) - np.mean(BEFORE, axis=1)
    # Student's t, checked in tests/course/test_compare.py
    quantile = interval_quantile(len(differences) - 1)
    return differences.mean(), quantile * differences.std(ddof=1) / math.sqrt(len(differences))


def test_the_comparison_table_is_sorted_by_gain_with_the_settings_that_differ(
    fixture_runs: Path,
) -> None:
    selected = find_runs("fx-*", fixture_runs)
    assert [run.name for run in selected] == [
        "fx-lr0.001-seed0", "fx-lr0.001-seed1", "fx-lr0.003-seed0", "fx-lr0.003-seed1", "fx-older",
    ]  # fmt: skip
    table = comparison_table(selected, "reward")
    expected = {
        f"fx-lr{lr:g}-seed{seed}": expected_gain(after) for (lr, seed), after in AFTER.items()
    }
    ranked = sorted(expected, key=lambda name: -expected[name][0])
    assert list(table.index) == [*ranked, "fx-older"]
    # What differs between the runs, and what the older run did not record (so it may).
    differ = ["backend", "group_size", "groups_per_step", "eval_problems", "learning_rate", "seed"]
    assert list(table.columns[: len(differ) + 1]) == [*differ, "steps"]
    assert table.loc["fx-older", differ].isna().all()
    for name, (gain, half_width) in expected.items():
        assert table.loc[name, "unseen facts gain"] == pytest.approx(gain)
        assert table.loc[name, "unseen facts ±"] == pytest.approx(half_width)
        assert table.loc[name, "note"] == ""
    # The older run stored one held-out set, unnamed: it is not assumed to be the same set.
    older = table.loc["fx-older"]
    assert math.isnan(older["unseen facts before"]) and math.isnan(older["held-out after"])
    assert older["held-out before"] == pytest.approx(np.mean(BEFORE))
    assert math.isnan(older["held-out gain"]) and "did not store them" in older["note"]


def test_the_seed_arithmetic(fixture_runs: Path) -> None:
    newer = find_runs("fx-lr*", fixture_runs)
    table = comparison_table(newer, "reward")
    assert list(table.columns[:2]) == ["learning_rate", "seed"]  # nothing else differs
    gains = {key: expected_gain(after)[0] for key, after in AFTER.items()}
    # Two seeds per learning rate: each pair's variance has one degree of freedom.
    pairs = [(gains[(lr, 0)], gains[(lr, 1)]) for lr in (1e-3, 3e-3)]
    pooled = math.sqrt(sum((a - b) ** 2 / 2 for a, b in pairs) / 2)
    assert seed_spread(table, "unseen facts gain", ["learning_rate", "seed"]) == (
        pytest.approx(pooled),
        2,
    )
    # 80% power at 95%: n >= 2 ((t_0.975 + t_0.8) s / d)^2, about 2 (2.80 x 2)^2 = 62.7 with
    # normal quantiles; the t quantiles at 2(n - 1) degrees of freedom make it 64.
    assert seeds_needed(0.1, 0.05) == 64
    assert seeds_needed(0.01, 0.5) == 2  # never fewer than two: one seed has no spread


def test_every_held_out_metric_has_its_counts() -> None:
    assert tuple(RATIOS) == HELD_OUT_METRICS


def test_the_comparison_notebook_runs_on_the_fixture(
    fixture_runs: Path, run_env: dict, tmp_path: Path
) -> None:
    run_env["COURSE_RUNS_DIR"] = str(fixture_runs)
    out = tmp_path / "compare.ipynb"
    parameters = {"runs": "fx-*", "smoothing": 3}
    code, log = finish(papermill("06_compare_runs.ipynb", out, parameters, run_env))
    assert code == 0, log[-3000:]
    executed = nbformat.read(out, as_version=4)
    outputs = [o for c in executed.cells for o in c.get("outputs", [])]
    assert sum("image/png" in o.get("data", {}) for o in outputs) == 2  # curves, intervals
    printed = "".join(o.get("text", "") for o in outputs)
    assert "pooled, 2 degrees of freedom" in printed
    [shown] = [  # the table of these runs, shown beside the stored sweep's
        o.data["text/plain"]
        for o in outputs
        if "unseen facts: gain" in o.get("data", {}).get("text/plain", "")
        and "fx-" in o.data["text/plain"]
    ]
    # A wide table is printed in blocks, each listing the runs in the same order.
    order = list(dict.fromkeys(line.split()[0] for line in shown.splitlines() if line[:3] == "fx-"))
    ranked = sorted(AFTER, key=lambda key: -expected_gain(AFTER[key])[0])
    assert order == [*(f"fx-lr{lr:g}-seed{seed}" for lr, seed in ranked), "fx-older"]
