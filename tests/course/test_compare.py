"""The statistics notebook 06 compares runs with (`sweeps.compare`): seeds counted as seeds,
t quantiles for few degrees of freedom, and a seed rule with the power it claims."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from sweeps.compare import (
    POWER,
    by_setting,
    interval_quantile,
    problem_scores,
    score_half_width,
    seed_spread,
    seeds_needed,
    t_quantile,
)

GAIN = "unseen facts gain"


def runs_table(rows: dict[str, tuple[float, int, float]]) -> pd.DataFrame:
    """Runs by name: (learning_rate, seed, gain)."""
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=["learning_rate", "seed", GAIN])
    return frame.rename_axis("run")


def test_two_runs_with_the_same_seed_are_one_seed() -> None:
    table = runs_table({"a": (1e-3, 0, 0.10), "b": (1e-3, 0, 0.14)})
    # Nothing differs between them, not even the seed: one seed, nothing to measure.
    [group] = by_setting(table, GAIN, []).values()
    assert len(group) == 1 and group.iloc[0] == pytest.approx(0.12)
    spread, freedom = seed_spread(table, GAIN, [])
    assert freedom == 0 and spread != spread  # NaN


def test_repeats_of_a_seed_are_averaged_before_the_spread() -> None:
    table = runs_table({"a": (1e-3, 0, 0.10), "b": (1e-3, 0, 0.14), "c": (1e-3, 1, 0.20)})
    [group] = by_setting(table, GAIN, ["seed"]).values()
    assert sorted(group) == pytest.approx([0.12, 0.20])  # two seeds, not three runs
    spread, freedom = seed_spread(table, GAIN, ["seed"])
    assert freedom == 1 and spread == pytest.approx(abs(0.20 - 0.12) / 2**0.5)


@pytest.mark.parametrize(
    ("probability", "freedom", "tabulated"),
    [
        (0.975, 1, 12.706),
        (0.975, 2, 4.303),
        (0.975, 4, 2.776),
        (0.975, 30, 2.042),
        (0.8, 2, 1.061),
        (0.8, 10, 0.879),
    ],  # fmt: skip
)
def test_t_quantiles_match_the_tables(probability: float, freedom: int, tabulated: float) -> None:
    assert t_quantile(probability, freedom) == pytest.approx(tabulated, abs=1e-3)


def test_a_many_problem_interval_is_close_to_the_normal_one() -> None:
    assert interval_quantile(10_000) == pytest.approx(1.960, abs=1e-3)


@pytest.mark.parametrize(("spread", "difference"), [(0.1, 0.1), (0.05, 0.04), (0.1, 0.05)])
def test_the_seed_rule_has_80_percent_power(spread: float, difference: float) -> None:
    """Simulated: n seeds per setting, a two-sided pooled t test at 95%; with seeds_needed's n
    the true difference is found at least 80% of the time, with one seed fewer it is not."""
    rng = np.random.default_rng(0)

    def power(n: int, trials: int = 20_000) -> float:
        a = rng.normal(0.0, spread, (trials, n))
        b = rng.normal(difference, spread, (trials, n))
        pooled = np.sqrt((a.var(axis=1, ddof=1) + b.var(axis=1, ddof=1)) / 2)
        t = (b.mean(axis=1) - a.mean(axis=1)) / (pooled * math.sqrt(2 / n))
        return float((np.abs(t) > interval_quantile(2 * (n - 1))).mean())

    n = seeds_needed(spread, difference)
    assert power(n) >= POWER - 0.01
    if n > 2:
        assert power(n - 1) < POWER + 0.01


def test_problem_scores_average_to_the_score_and_spread_as_its_error() -> None:
    """One value per problem: its own mean when every problem has the same samples; for a
    ratio with uneven denominators, values whose mean is the score and whose standard error
    is the score's interval over t."""
    counts = [
        {"samples": 4, "reward": 2.9, "correct_and_format": 2, "format": 3},
        {"samples": 4, "reward": 0.0, "correct_and_format": 0, "format": 4},
        {"samples": 4, "reward": 3.0, "correct_and_format": 3, "format": 3},
        {"samples": 4, "reward": -0.2, "correct_and_format": 0, "format": 2},
    ]
    scores = {"reward": 5.7 / 16, "correct_given_format": 5 / 12, "problems": counts}
    assert problem_scores(scores, "reward") == pytest.approx([0.725, 0.0, 0.75, -0.05])
    values_P = problem_scores(scores, "correct_given_format")
    assert values_P.mean() == pytest.approx(5 / 12)
    error = values_P.std(ddof=1) / math.sqrt(len(values_P))
    assert error * interval_quantile(3) == pytest.approx(
        score_half_width(scores, "correct_given_format")
    )
    assert problem_scores({"reward": 0.5}, "reward") is None  # no counts per problem
