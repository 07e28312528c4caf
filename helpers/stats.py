"""How precise a held-out score is: the standard error of `evaluate`'s mean reward."""

from __future__ import annotations


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
