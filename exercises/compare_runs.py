"""Notebook 05's exercises: is one run's held-out gain larger than another's, by more than
the held-out problems' noise?"""

from __future__ import annotations

import math

import numpy as np

from exercises.check import Case, Exercise, Mistake


def _mean_and_variance(values_P: np.ndarray, ddof: int = 1) -> tuple[float, float]:
    """The mean over problems and the variance of that mean (`ddof` 1: a sample's estimate)."""
    return float(values_P.mean()), float(values_P.var(ddof=ddof)) / len(values_P)


def _gain_difference(
    before_a_P: np.ndarray,
    after_a_P: np.ndarray,
    before_b_P: np.ndarray,
    after_b_P: np.ndarray,
    same_problems: bool,
) -> tuple[float, float]:
    gain_a_P, gain_b_P = after_a_P - before_a_P, after_b_P - before_b_P
    if same_problems:  # one problem's difficulty weighs on both runs: pair them
        difference, variance = _mean_and_variance(gain_a_P - gain_b_P)
        return difference, math.sqrt(variance)
    (mean_a, variance_a), (mean_b, variance_b) = map(_mean_and_variance, (gain_a_P, gain_b_P))
    return mean_a - mean_b, math.sqrt(variance_a + variance_b)


# Each typical mistake changes one thing in the reference: in how a run's gain is measured,
# or, with `same_problems` false (or true), in how the two runs' errors combine.


def _before_and_after_independent(before_a_P, after_a_P, before_b_P, after_b_P, same_problems):
    every_P = (before_a_P, after_a_P, before_b_P, after_b_P)
    variance = sum(_mean_and_variance(scores_P)[1] for scores_P in every_P)
    difference = float((after_a_P - before_a_P).mean() - (after_b_P - before_b_P).mean())
    return difference, math.sqrt(variance)


def _standard_errors_added(before_a_P, after_a_P, before_b_P, after_b_P, same_problems):
    if same_problems:
        return _gain_difference(before_a_P, after_a_P, before_b_P, after_b_P, True)
    (mean_a, variance_a), (mean_b, variance_b) = (
        _mean_and_variance(after_a_P - before_a_P),
        _mean_and_variance(after_b_P - before_b_P),
    )
    return mean_a - mean_b, math.sqrt(variance_a) + math.sqrt(variance_b)


def _standard_deviation(before_a_P, after_a_P, before_b_P, after_b_P, same_problems):
    gain_a_P, gain_b_P = after_a_P - before_a_P, after_b_P - before_b_P
    difference = float(gain_a_P.mean() - gain_b_P.mean())
    if same_problems:
        return difference, float((gain_a_P - gain_b_P).std(ddof=1))
    return difference, math.sqrt(gain_a_P.var(ddof=1) + gain_b_P.var(ddof=1))


def _paired_across_runs(before_a_P, after_a_P, before_b_P, after_b_P, same_problems):
    return _gain_difference(before_a_P, after_a_P, before_b_P, after_b_P, True)


def _unpaired_across_runs(before_a_P, after_a_P, before_b_P, after_b_P, same_problems):
    return _gain_difference(before_a_P, after_a_P, before_b_P, after_b_P, False)


def _population_variance(before_a_P, after_a_P, before_b_P, after_b_P, same_problems):
    gain_a_P, gain_b_P = after_a_P - before_a_P, after_b_P - before_b_P
    if same_problems:
        difference, variance = _mean_and_variance(gain_a_P - gain_b_P, ddof=0)
        return difference, math.sqrt(variance)
    (mean_a, variance_a), (mean_b, variance_b) = (
        _mean_and_variance(gain_a_P, ddof=0),
        _mean_and_variance(gain_b_P, ddof=0),
    )
    return mean_a - mean_b, math.sqrt(variance_a + variance_b)


def _gain_cases() -> list[Case]:
    def scores(*values: float) -> np.ndarray:
        return np.array(values, dtype=float)

    # Problems of mixed difficulty, so that pairing a problem with itself matters.
    different = (
        scores(0.1, 0.9, 0.4, 0.0, 0.7),
        scores(0.3, 1.0, 0.5, 0.2, 0.8),
        scores(0.6, 0.0, 0.2, 0.9, 0.5),
        scores(0.6, 0.1, 0.4, 0.9, 0.7),
    )
    # One seed, two learning rates: the same problems, scored the same before training.
    shared_before = scores(0.2, 0.8, 0.5, 0.0, 1.0, 0.4)
    shared = (
        shared_before,
        scores(0.4, 0.9, 0.7, 0.1, 1.0, 0.6),
        shared_before,
        scores(0.3, 0.8, 0.5, 0.1, 0.9, 0.6),
    )
    uneven = (
        scores(0.2, 0.5, 0.9),
        scores(0.4, 0.6, 1.0),
        scores(0.1, 0.3, 0.5, 0.7, 0.9, 0.5),
        scores(0.1, 0.5, 0.5, 0.6, 1.0, 0.6),
    )
    return [
        Case("two seeds, so each run drew its own five problems", (*different, False)),
        Case("one seed, two learning rates: the same six problems", (*shared, True)),
        Case("two seeds with different problem counts (three and six)", (*uneven, False)),
    ]


GAIN_DIFFERENCE = Exercise(
    name="gain_difference",
    notebook="05_compare_runs",
    minutes=10,
    reference=_gain_difference,
    cases=_gain_cases,
    mistakes=[
        Mistake(
            "before and after treated as independent",
            "you treated a run's scores before and after training as independent. They are "
            "the same problems scored twice, and a hard problem is hard both times: take each "
            "problem's gain (after - before) first, then the spread of those gains. Unpaired, "
            "the problems' difficulty stays in the error, so the interval comes out too wide.",
            _before_and_after_independent,
        ),
        Mistake(
            "the runs' standard errors added",
            "you added the two runs' standard errors. Independent errors add as variances: "
            "the difference's standard error is sqrt(se_A**2 + se_B**2), which is smaller "
            "than se_A + se_B.",
            _standard_errors_added,
        ),
        Mistake(
            "the standard deviation where the standard error belongs",
            "you returned a standard deviation, how much one problem's gain varies. A mean "
            "over P problems varies sqrt(P) times less: divide each variance by its number of "
            "problems (a standard deviation by sqrt of it).",
            _standard_deviation,
        ),
        Mistake(
            "paired across runs whose problems differ",
            "you paired problem i of run A with problem i of run B, but with different seeds "
            "each run drew its own problems: the pairs are arbitrary (shuffle one run's "
            "problems and your answer changes). The two runs' gains are then independent, so "
            "their variances add.",
            _paired_across_runs,
        ),
        Mistake(
            "unpaired across runs that share their problems",
            "these runs share their seed, so they scored the same problems in the same order, "
            "and you treated their gains as independent. A problem that is hard for run A is "
            "hard for run B too: pair them (the difference of the two gains on each problem), "
            "so that the problems' difficulty cancels instead of widening the interval.",
            _unpaired_across_runs,
        ),
        Mistake(
            "the population variance (ddof=0)",
            "numpy's var and std divide by the count by default (ddof=0), which describes "
            "these problems only; to estimate the spread of problems in general from a "
            "sample of them, divide by count - 1: pass ddof=1.",
            _population_variance,
        ),
    ],
)
