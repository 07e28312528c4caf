"""pass@k: the unbiased estimate for one problem from n samples, and its curve over problems
with an interval."""

from __future__ import annotations

from collections.abc import Callable
from math import comb

import numpy as np


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """The chance that at least one of k samples is correct, estimated without bias from
    `correct` right answers among `samples` >= k (Chen et al. 2021):
    1 - C(samples - correct, k) / C(samples, k)."""
    if not 1 <= k <= samples or not 0 <= correct <= samples:
        raise ValueError(f"k must be from 1 to samples ({samples}), correct from 0 to samples")
    return 1.0 - comb(samples - correct, k) / comb(samples, k)


def pass_at_k_curve(
    problems: list[dict],
    k_max: int,
    baseline: list[dict] | None = None,
    resamples: int = 2000,
    estimate: Callable[[int, int, int], float] = pass_at_k,
) -> dict[str, np.ndarray]:
    """pass@k for k = 1..k_max, averaged over problems, with its 95% interval.

    `problems` are `evaluate`'s counts per problem ("samples" and "correct"), each with at
    least k_max samples. Whole problems are resampled (samples of one problem are not
    independent), with a fixed seed. Given `baseline` (the same problems in the same order,
    scored by other weights), the curve and interval are of the gain, problems - baseline,
    each resample taking the same problems from both. `estimate(samples, correct, k)` is
    one problem's pass@k (notebook 05 passes the learner's).
    """

    def per_problem(counts: list[dict]) -> np.ndarray:  # problems x k
        if any(p["samples"] < k_max for p in counts):
            raise ValueError(f"pass@{k_max} needs at least {k_max} samples of every problem")
        ks = range(1, k_max + 1)
        return np.array(
            [[estimate(int(p["samples"]), int(p["correct"]), k) for k in ks] for p in counts]
        )

    values_PK = per_problem(problems)
    if baseline is not None:
        values_PK = values_PK - per_problem(baseline)
    pick = np.random.default_rng(0).integers(0, len(values_PK), size=(resamples, len(values_PK)))
    resampled_RK = values_PK[pick].mean(axis=1)
    return {
        "k": np.arange(1, k_max + 1),
        "value": values_PK.mean(axis=0),
        "low": np.percentile(resampled_RK, 2.5, axis=0),
        "high": np.percentile(resampled_RK, 97.5, axis=0),
    }
