"""The held-out intervals (helpers/training.py):
problem-clustered bootstrap intervals of each score and of a gain, and pass@k's curve and its
interval."""

from __future__ import annotations

import numpy as np
import pytest

from helpers.training import SCORES, bootstrap_interval, compare, pass_at_k_curve


def problem(samples, correct, fmt, correct_and_format, reward=None) -> dict:
    if reward is None:
        reward = correct - 0.1 * (samples - fmt)
    return {
        "samples": samples,
        "reward": reward,
        "correct": correct,
        "format": fmt,
        "correct_and_format": correct_and_format,
    }


BEFORE = [problem(4, c, 4, c) for c in (0, 1, 1, 2, 0, 3, 4, 1)]
AFTER = [problem(4, min(c + 1, 4), 4, min(c + 1, 4)) for c in (0, 1, 1, 2, 0, 3, 4, 1)]


def by_hand(before, after=None, resamples=2000, seed=0):
    """The same bootstrap, written out: whole problems resampled, one pick for both."""
    rng = np.random.default_rng(seed)
    pick = rng.integers(0, len(before), size=(resamples, len(before)))

    def pooled(problems, row):
        s = {k: sum(problems[i][k] for i in row) for k in problems[0]}
        return s["correct"] / max(s["samples"], 1)

    values = [
        pooled(after, row) - pooled(before, row) if after else pooled(before, row) for row in pick
    ]
    return np.percentile(values, 2.5), np.percentile(values, 97.5)


def test_a_scores_interval_resamples_whole_problems():
    intervals = bootstrap_interval(BEFORE)
    assert set(intervals) == set(SCORES)
    low, high = intervals["correct"]
    assert (low, high) == pytest.approx(by_hand(BEFORE))
    assert low < sum(p["correct"] for p in BEFORE) / 32 < high
    assert bootstrap_interval(BEFORE) == intervals  # the fixed seed repeats it exactly
    few = bootstrap_interval(BEFORE, resamples=20, seed=1)["correct"]
    assert few == pytest.approx(by_hand(BEFORE, resamples=20, seed=1))
    assert few != pytest.approx(by_hand(BEFORE, resamples=20, seed=0))


def test_a_gains_interval_takes_the_same_problems_before_and_after():
    gain = bootstrap_interval(BEFORE, AFTER)
    assert gain["correct"] == pytest.approx(by_hand(BEFORE, AFTER))
    # Every problem gained (or was already at 4 of 4): with the same problems drawn for
    # both, no resample can show a loss; drawn apart, many would.
    assert gain["correct"][0] > 0
    same = bootstrap_interval(BEFORE, BEFORE)
    assert all(interval == (0.0, 0.0) for interval in same.values())


def test_compare_gives_each_score_before_after_gain_and_intervals():
    before = {"correct": 0.375, "reward": 0.3, "format": 1.0, "correct_given_format": 0.375}
    after = {"correct": 0.5, "reward": 0.45, "format": 0.75, "correct_given_format": 0.5}
    result = compare({**before, "problems": BEFORE}, {**after, "problems": AFTER})
    assert list(result) == list(SCORES)
    for score in SCORES:
        row = result[score]
        assert row["before"] == before[score] and row["after"] == after[score]
        assert row["gain"] == pytest.approx(after[score] - before[score])
        assert row["before_interval"] == bootstrap_interval(BEFORE)[score]
        assert row["after_interval"] == bootstrap_interval(AFTER)[score]
        assert row["gain_interval"] == bootstrap_interval(BEFORE, AFTER)[score]


def test_pass_at_k_curve_interval_is_a_problem_bootstrap_of_the_mean():
    problems = [{"samples": 4, "correct": c} for c in (0, 1, 2, 4, 3, 0, 1)]
    curve = pass_at_k_curve(problems, 3, resamples=500)
    assert list(curve["k"]) == [1, 2, 3]
    values = np.array(
        [
            [1 - (4 - c) / 4, 1 - (4 - c) * (3 - c) / 12 if c <= 2 else 1.0]
            for c in (0, 1, 2, 4, 3, 0, 1)
        ]
    )
    np.testing.assert_allclose(curve["value"][:2], values.mean(axis=0))
    pick = np.random.default_rng(0).integers(0, 7, size=(500, 7))
    resampled = values[pick].mean(axis=1)
    np.testing.assert_allclose(curve["low"][:2], np.percentile(resampled, 2.5, axis=0))
    np.testing.assert_allclose(curve["high"][:2], np.percentile(resampled, 97.5, axis=0))
    assert np.all(np.diff(curve["value"]) > 0)  # more tries, more problems solved


def test_pass_at_k_gain_takes_the_same_problems_from_both():
    before = [{"samples": 4, "correct": c} for c in (0, 1, 2, 3)]
    after = [{"samples": 4, "correct": c + 1} for c in (0, 1, 2, 3)]
    gain = pass_at_k_curve(after, 2, before)
    assert gain["value"][0] == pytest.approx(0.25)
    assert gain["low"][0] == pytest.approx(0.25) and gain["high"][0] == pytest.approx(0.25)
    assert np.all(gain["low"] > 0)
    with pytest.raises(ValueError, match="pass@4 needs at least 4 samples"):
        pass_at_k_curve(after, 4, [{"samples": 3, "correct": 1}] * 4)
