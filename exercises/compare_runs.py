"""Notebook 06's exercises: is one run's held-out gain larger than another's, by more than
the held-out problems' noise?"""

from __future__ import annotations

import math

import numpy as np

from exercises.check import Case, Exercise, Mistake
from sweeps.compare import seeds_needed, t_quantile


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


def _before_ignored_when_paired(before_a_P, after_a_P, before_b_P, after_b_P, same_problems):
    if not same_problems:
        return _gain_difference(before_a_P, after_a_P, before_b_P, after_b_P, False)
    difference, variance = _mean_and_variance(after_a_P - after_b_P)
    return difference, math.sqrt(variance)


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
    # One seed, two learning rates: the same problems, but each run scored the base model
    # itself, with answers of its own, so their scores before training differ a little.
    shared = (
        scores(0.2, 0.8, 0.5, 0.0, 1.0, 0.4),
        scores(0.4, 0.9, 0.7, 0.1, 1.0, 0.6),
        scores(0.3, 0.7, 0.5, 0.1, 0.9, 0.4),
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
    notebook="06_compare_runs",
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
            "the scores before training ignored when the problems are shared",
            "with shared problems you compared the two runs' scores after training and left "
            "out their scores before. Each run scored the base model itself, with answers of "
            "its own, so the two before scores differ too: pair each problem's gain "
            "(after - before, per run), then the difference of the two gains.",
            _before_ignored_when_paired,
        ),
        Mistake(
            "the difference taken the other way round",
            "your difference has the right size and the wrong sign: return run A's mean gain "
            "minus run B's (the cells below call the run with the largest gain A).",
            lambda before_a_P, after_a_P, before_b_P, after_b_P, same_problems: _gain_difference(
                before_b_P, after_b_P, before_a_P, after_a_P, same_problems
            ),
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


def _seeds_per_setting(spread: float, run_error: float, difference: float) -> int:
    return seeds_needed(max(spread, run_error), difference)


def _least_seeds(spread: float, difference: float, reach, settings: float = 2.0) -> int:
    """The least n >= 2 with reach(n) x spread x sqrt(settings / n) <= difference."""
    for n in range(2, 100_001):
        if reach(n) * spread * math.sqrt(settings / n) <= difference:
            return n
    raise ValueError("more than 100000 seeds")


def _t_reach(freedom_of):
    return lambda n: t_quantile(0.975, freedom_of(n)) + t_quantile(0.8, freedom_of(n))


def _seed_cases() -> list[Case]:
    return [
        # First: here each typical mistake gives a count of its own, so each gets its hint.
        Case("seeds spread by 0.06, one run's error 0.1, a difference of 0.15", (0.06, 0.1, 0.15)),
        Case("seeds spread by 0.1, one run's error 0.04, a difference of 0.1", (0.1, 0.04, 0.1)),
        Case(
            "seeds spread by 0.05, one run's error 0.08, a difference of 0.08", (0.05, 0.08, 0.08)
        ),
    ]


SEEDS_PER_SETTING = Exercise(
    name="seeds_per_setting",
    notebook="06_compare_runs",
    minutes=10,
    reference=_seeds_per_setting,
    cases=_seed_cases,
    mistakes=[
        Mistake(
            "the spread between seeds used as it is",
            "you used the spread between seeds as it came out. From two or three seeds it "
            "can land below one run's own evaluation error, which every seed's gain carries, "
            "so the true spread cannot be that small: take the larger of the two.",
            lambda spread, run_error, difference: seeds_needed(spread, difference),
        ),
        Mistake(
            "the evaluation error added to the spread",
            "you added the evaluation error to the spread between seeds. That spread already "
            "holds it (each seed's gain was measured on its own problems), so adding it counts "
            "it twice: take the larger of the two, not their sum.",
            lambda spread, run_error, difference: seeds_needed(
                math.hypot(spread, run_error), difference
            ),
        ),
        Mistake(
            "normal quantiles for t",
            "you used the normal quantiles (1.96 and 0.84), or a one-sided t_quantile(0.95, f), "
            "which gives the same count here. With a handful of seeds the spread itself is "
            "estimated, and the test is two-sided: use Student's t at 2(n - 1) degrees of "
            "freedom, t_quantile(0.975, f) + t_quantile(0.8, f), recomputed for every n you try.",
            lambda spread, run_error, difference: _least_seeds(
                max(spread, run_error), difference, lambda n: 1.959964 + 0.841621
            ),
        ),
        Mistake(
            "one setting's noise only",
            "you used sqrt(1 / n): that is the error of one setting's mean. Both settings' "
            "means are noisy, so their difference has twice the variance: sqrt(2 / n).",
            lambda spread, run_error, difference: _least_seeds(
                max(spread, run_error), difference, _t_reach(lambda n: 2 * (n - 1)), 1.0
            ),
        ),
        Mistake(
            "n - 1 degrees of freedom",
            "you took n - 1 degrees of freedom. The spread is pooled over both settings, "
            "each with n seeds, so it has 2(n - 1).",
            lambda spread, run_error, difference: _least_seeds(
                max(spread, run_error), difference, _t_reach(lambda n: n - 1)
            ),
        ),
        Mistake(
            "one seed too few: the last n that falls short",
            "you returned one seed too few: the last n for which the condition still fails. "
            "Return the first n for which (t(0.975, f) + t(0.8, f)) * s * sqrt(2 / n) <= "
            "difference holds.",
            lambda spread, run_error, difference: (
                _seeds_per_setting(spread, run_error, difference) - 1
            ),
        ),
    ],
)
