"""How precise a held-out score is: the standard error of `evaluate`'s mean reward, and the
unbiased pass@k of a problem from n samples."""

from __future__ import annotations

from math import comb

import numpy as np


def reward_standard_error(scores: dict) -> float:
    """The standard error of `evaluate`'s mean reward, from its rates alone.

    MathEnv's reward is correct - 0.1 x (1 - format), so it takes four values, and the
    correct rate, the format rate and their overlap give its whole distribution.
    """
    n = scores["samples"]
    right_formatted = scores["correct_given_format"] * scores["format"]  # reward 1
    right_unformatted = scores["correct"] - right_formatted  # reward 0.9
    wrong_unformatted = 1.0 - scores["format"] - right_unformatted  # reward -0.1
    mean = right_formatted + 0.9 * right_unformatted - 0.1 * wrong_unformatted
    if abs(mean - scores["reward"]) > 1e-9:
        raise RuntimeError("MathEnv's reward is no longer correct - 0.1 x (1 - format)")
    second_moment = right_formatted + 0.81 * right_unformatted + 0.01 * wrong_unformatted
    variance = max(second_moment - mean**2, 0.0) * n / (n - 1)
    return (variance / n) ** 0.5


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """The chance that at least one of k samples is correct, estimated without bias from
    `correct` right answers among `samples` >= k (Chen et al. 2021):
    1 - C(samples - correct, k) / C(samples, k)."""
    if not 1 <= k <= samples or not 0 <= correct <= samples:
        raise ValueError(f"k must be from 1 to samples ({samples}), correct from 0 to samples")
    return 1.0 - comb(samples - correct, k) / comb(samples, k)


def pass_at_k_curve(
    problems: list[dict], k_max: int, baseline: list[dict] | None = None, resamples: int = 2000
) -> dict[str, np.ndarray]:
    """pass@k for k = 1..k_max, averaged over problems, with its 95% interval.

    `problems` are `evaluate`'s counts per problem ("samples" and "correct"), each with at
    least k_max samples. Whole problems are resampled (samples of one problem are not
    independent), with a fixed seed. Given `baseline` (the same problems in the same order,
    scored by other weights), the curve and interval are of the gain, problems - baseline,
    each resample taking the same problems from both.
    """

    def per_problem(counts: list[dict]) -> np.ndarray:  # problems x k
        if any(p["samples"] < k_max for p in counts):
            raise ValueError(f"pass@{k_max} needs at least {k_max} samples of every problem")
        ks = range(1, k_max + 1)
        return np.array(
            [[pass_at_k(int(p["samples"]), int(p["correct"]), k) for k in ks] for p in counts]
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
