"""Notebook 06's "Try this" bullets that read runs, done as each bullet says, on the runs it
names: `make sweep`'s own (`sweep-*`, the grid in sweeps/default.toml) and those of
`make sweep SWEEP="-p seed 0 1 2 --name seeds3"` (`seeds3-*`).

Training nine runs of notebook 04 per test would take most of an hour here, so the runs are
written by hand (`tests.sweep_support.write_sweep_runs`): named by the sweep runner's own plan
of the grid, laid out as a sweep's run folder, with held-out counts chosen so that what the
notebook prints can be worked out here from the counts alone. The bullet that interrupts a
real sweep is tested in tests/long/test_exercises.py.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest

from tests.notebook_support import kernel_env, printed, probe, run, succeeded, with_probe
from tests.sweep_support import (
    COUNTS_AFTER,
    SAMPLES,
    held_out_counts,
    write_sweep_runs,
)

NOTEBOOK = "06_compare_runs.ipynb"
SEEDS3_SWEEP = ["-p", "seed", "0", "1", "2", "--name", "seeds3"]  # the first bullet's SWEEP
SPREAD_CELL = "spread, freedom = seed_spread("
YOUR_SWEEP = "your sweep, "  # how 05 labels the runs `runs` picks
CURVES_PROBE = """{
    "lines": [[line.get_label(), [float(y) for y in line.get_ydata()]] for line in ax.lines],
    "raw": {run.name: [r[curve_metric] for r in run.records] for run in selected},
}"""


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs/ folder after `make sweep` and then the first bullet's sweep."""
    folder = tmp_path_factory.mktemp("sweeps")
    write_sweep_runs(folder / "runs", [])
    write_sweep_runs(folder / "runs", SEEDS3_SWEEP)
    return folder


def run_05(folder: Path, out: str, parameters: dict) -> tuple[str, dict]:
    """Notebook 06 at `parameters` on `folder`'s runs: what its comparison cell printed, and
    what the probe after its curves cell saw."""
    notebook = with_probe(NOTEBOOK, folder / out, CURVES_PROBE, after="curve_metric = ")
    executed = succeeded(run(notebook, folder / out / "out.ipynb", parameters, kernel_env(folder)))
    # The comparison cell prints the stored sweep's lines first, then those of these runs.
    text = printed(executed, SPREAD_CELL)
    return text[text.index(YOUR_SWEEP) :], probe(executed)


def value(counts: tuple[int, ...], metric: str) -> float:
    """`metric` of held-out counts (well-formed, right among them, right but not well-formed),
    worked out from the rewards: 1 right boxed, 0.9 right unboxed, 0 and -0.1 wrong."""
    formed, right_formed, right_unformed = counts
    wrong_unformed = SAMPLES - formed - right_unformed
    return {
        "reward": (right_formed + 0.9 * right_unformed - 0.1 * wrong_unformed) / SAMPLES,
        "correct_given_format": right_formed / formed,
    }[metric]


def gains(metric: str, seeds: list[int]) -> dict[float, list[float]]:
    """Per learning rate, each seed's gain in `metric` on the first held-out set (the one 05
    compares on)."""
    before = value(held_out_counts(None, 0, 0), metric)
    return {
        rate: [value(held_out_counts(rate, seed, 0), metric) - before for seed in seeds]
        for rate in COUNTS_AFTER
    }


def pooled_spread(by_rate: dict[float, list[float]]) -> tuple[float, int]:
    squares = sum(float(((np.array(g) - np.mean(g)) ** 2).sum()) for g in by_rate.values())
    freedom = sum(len(g) - 1 for g in by_rate.values())
    return math.sqrt(squares / freedom), freedom


def assert_compares(text: str, metric: str, seeds: list[int]) -> list[float]:
    """The comparison cell printed the pooled spread between seeds with its degrees of freedom,
    and the learning rates' mean gains, largest first, each over `seeds`; the rates in that
    order. Checked by the numbers on each line, not by the wording around them."""
    by_rate = gains(metric, seeds)
    spread, freedom = pooled_spread(by_rate)
    lines = text.splitlines()
    assert any({round(spread, 3), freedom} <= numbers(line) for line in lines), text
    means = {rate: float(np.mean(g)) for rate, g in by_rate.items()}
    ranked = sorted(means, key=lambda rate: -means[rate])
    # A setting's own line names one learning rate (the line after them names two).
    per_setting = [line for line in lines if line.count("learning_rate=") == 1]
    printed_rates = [float(re.search(r"learning_rate=([\d.e-]+)", line)[1]) for line in per_setting]
    assert printed_rates == ranked, per_setting
    for line, rate in zip(per_setting, ranked, strict=True):
        assert {round(means[rate], 3), len(seeds)} <= numbers(line), line
    return ranked


def numbers(line: str) -> set[float]:
    return {float(n) for n in re.findall(r"(?<![\w.=])[-+]?\d+(?:\.\d+)?(?![\w.])", line)}


def test_three_seeds_measure_the_spread_with_more_freedom(folder: Path) -> None:
    """Try this: after that sweep, `runs = "seeds3-*"`. The spread between seeds is pooled
    over three seeds a setting, six degrees of freedom, and comes out other than two seeds'."""
    text, seen = run_05(folder, "seeds3", {"runs": "seeds3-*"})
    assert sorted(seen["raw"]) == [
        f"seeds3-learning_rate{rate:g}-seed{seed}" for rate in COUNTS_AFTER for seed in (0, 1, 2)
    ]
    assert_compares(text, "reward", [0, 1, 2])
    assert pooled_spread(gains("reward", [0, 1, 2]))[0] != pooled_spread(gains("reward", [0, 1]))[0]


def test_metric_correct_given_format_ranks_the_learning_rates_by_it(folder: Path) -> None:
    """Try this: `metric = "correct_given_format"`, on `make sweep`'s runs. The mean gains and
    their ranking are those of the right answers among the well-formed, which here rank the
    learning rates otherwise than the default metric does."""
    text, _ = run_05(folder, "metric", {"metric": "correct_given_format"})
    ranked = assert_compares(text, "correct_given_format", [0, 1])
    by_reward = gains("reward", [0, 1])
    assert ranked != sorted(by_reward, key=lambda rate: -float(np.mean(by_reward[rate])))


def moving_mean(values: list[float], window: int) -> list[float]:
    return [float(np.mean(values[max(0, k - window + 1) : k + 1])) for k in range(len(values))]


@pytest.mark.parametrize("smoothing", [1, 20])
def test_smoothing_sets_the_window_of_each_runs_bold_curve(folder: Path, smoothing: int) -> None:
    """Try this: `smoothing = 1`, then `smoothing = 20`, on `make sweep`'s runs. Each run's bold
    curve is the mean over that many steps of its raw one (all of its 12 steps at 20); at 1 it
    is the raw curve. The comparison below the curves does not depend on the window."""
    text, seen = run_05(folder, f"smoothing-{smoothing}", {"smoothing": smoothing})
    assert sorted(seen["raw"]) == [
        f"sweep-learning_rate{rate:g}-seed{seed}" for rate in COUNTS_AFTER for seed in (0, 1)
    ]
    # Each bold curve is labelled with the settings that differ; the faint raw ones are unnamed.
    bold = {label: values for label, values in seen["lines"] if not label.startswith("_")}
    smoothed = []
    for name, raw in seen["raw"].items():
        rate, seed = name.removeprefix("sweep-learning_rate").split("-seed")
        curve = bold[f"learning_rate={float(rate)}, seed={seed}"]
        assert len(raw) == 12 and curve == pytest.approx(moving_mean(raw, smoothing), abs=1e-12)
        smoothed.append(curve != raw)
    assert len(bold) == 6 and any(smoothed) == (smoothing > 1)
    assert_compares(text, "reward", [0, 1])
