"""When a comparison of two models' logprobs can tell them apart, and when it cannot.

Sail and Tinker compute the same model with different kernels, so their logprobs for the
same tokens differ a little even with the same adapter (the "noise"). Checking that Sail
applied an adapter compares Sail's logprobs with the adapter's and with the base model's:
that can only decide something when the adapter moved the logprobs (the "effect", measured
by Tinker alone for both models) well beyond the noise. After a short cloud run it may not
have, so a notebook asserts only when `separation(...).decisive`, and otherwise shows the
numbers and says why it does not assert.
"""

from __future__ import annotations

from dataclasses import dataclass

# The effect must exceed the noise this many times: then whichever model Sail ran, the gap to
# the other one is at least twice the gap to it.
DECISIVE_RATIO = 3.0
# A standard error from a handful of values is itself too noisy to trust (with two values
# it is often tiny by chance), so a sign check needs at least this many values per group.
MIN_PER_GROUP = 8


def mean_abs_gap(a: list[list[float]], b: list[list[float]]) -> float:
    """Mean |a - b| over every token of every sequence (the sequences pair up)."""
    gaps = [abs(x - y) for xs, ys in zip(a, b, strict=True) for x, y in zip(xs, ys, strict=True)]
    return sum(gaps) / len(gaps)


@dataclass(frozen=True)
class Separation:
    effect: float  # mean |adapter - base| logprob, from one system
    noise: float  # the smaller of the two cross-system gaps

    @property
    def decisive(self) -> bool:
        return self.effect >= DECISIVE_RATIO * self.noise

    def sentence(self) -> str:
        return (
            f"the adapter moves these logprobs by {self.effect:.2e} on average, less than "
            f"{DECISIVE_RATIO:g}x the {self.noise:.2e} by which Sail and Tinker differ, so "
            "this comparison cannot tell the adapter from the base model: shown, not asserted"
        )


def separation(
    adapter: list[list[float]], base: list[list[float]], sampler: list[list[float]]
) -> Separation:
    """Tinker's adapter and base logprobs against the sampler's, for the same tokens."""
    noise = min(mean_abs_gap(adapter, sampler), mean_abs_gap(base, sampler))
    return Separation(mean_abs_gap(adapter, base), noise)


@dataclass(frozen=True)
class SignCheck:
    """Two groups' mean changes and their standard errors: can their signs be told?"""

    mean_positive: float
    mean_negative: float
    error_positive: float
    error_negative: float
    fewest: int  # values in the smaller group

    @property
    def decisive(self) -> bool:
        """Enough values, and each mean at least DECISIVE_RATIO standard errors from zero."""
        return (
            self.fewest >= MIN_PER_GROUP
            and abs(self.mean_positive) >= DECISIVE_RATIO * self.error_positive
            and abs(self.mean_negative) >= DECISIVE_RATIO * self.error_negative
        )

    def sentence(self) -> str:
        changes = f"the mean changes ({self.mean_positive:+.2e} and {self.mean_negative:+.2e} nats)"
        why = (
            f"come from as few as {self.fewest} completions, fewer than the {MIN_PER_GROUP} a "
            "standard error needs"
            if self.fewest < MIN_PER_GROUP
            else f"are within {DECISIVE_RATIO:g} standard errors ({self.error_positive:.1e}, "
            f"{self.error_negative:.1e}) of zero"
        )
        return f"{changes} {why}, so their signs are not measured: shown, not asserted"


def sign_check(positive: list[float], negative: list[float]) -> SignCheck:
    """Mean and standard error of the mean of each group (at least two values each)."""

    def mean_and_error(values: list[float]) -> tuple[float, float]:
        n = len(values)
        mean = sum(values) / n
        variance = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else float("inf")
        return mean, (variance / n) ** 0.5

    (mp, ep), (mn, en) = mean_and_error(positive), mean_and_error(negative)
    return SignCheck(mp, mn, ep, en, min(len(positive), len(negative)))
