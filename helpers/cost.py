"""What a notebook will spend, said before it spends it, and a cap that holds in the cloud.

An estimate is a ceiling, computed from a notebook's parameters alone: every rollout
samples at most `max_tokens`, and every trained rollout's datum holds its prompt plus at
most `max_tokens` completion tokens. Money is shown only where a price is known: from a
parameter, or from `prices.json` beside this file (which names its date and source). No
price is invented: without one the estimate says "no price known".

In the cloud, a run whose sampled-token ceiling exceeds its budget stops before its first
paid request, with one sentence; there is no prompt, so papermill behaves the same.
Locally nothing is paid for, so the estimate is printed and no cap applies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from helpers.errors import CourseConfigError

PRICES_PATH = Path(__file__).resolve().parent / "prices.json"
# Held-out sets a notebook-03 evaluation scores: locally unseen facts and seen facts in new
# wording; in the cloud orca-math has only the first.
HELD_OUT_SETS = {"local": 2, "cloud": 1}
# Large enough for the cloud defaults of every notebook (notebook 04's is the largest,
# 648 rollouts of at most 1,024 tokens), small enough that a mistyped parameter is caught.
DEFAULT_BUDGET_SAMPLED_TOKENS = 1_000_000


@dataclass(frozen=True)
class Estimate:
    """The most a run can use: rollouts sampled, tokens sampled, rollouts trained on."""

    rollouts: int
    sampled_tokens: int  # rollouts x max_tokens
    trained_rollouts: int
    trained_completion_tokens: int  # trained_rollouts x max_tokens, plus each one's prompt
    usd: float | None  # None: no price known

    def describe(self) -> str:
        money = "no price known" if self.usd is None else f"at most ${self.usd:,.2f}"
        return (
            f"estimate: {self.rollouts:,} rollouts, at most {self.sampled_tokens:,} sampled "
            f"tokens; training on at most {self.trained_rollouts:,} rollouts "
            f"({self.trained_completion_tokens:,} completion tokens plus their prompts); "
            f"{money}"
        )


def load_prices(path: Path = PRICES_PATH) -> dict:
    """The prices file: USD per million sampled and training tokens (null: not known)."""
    return json.loads(path.read_text())


def estimate(
    *,
    sampled_rollouts: int,
    trained_rollouts: int,
    max_tokens: int,
    usd_per_million_sampled: float | None = None,
    usd_per_million_training: float | None = None,
) -> Estimate:
    """The ceiling of a run's spend. Money needs both prices: a sampled-only figure would
    read as the whole bill. Training money counts completion tokens only (prompts unknown
    here), so it is a floor of the training part; the estimate says "plus their prompts"."""
    sampled_tokens = sampled_rollouts * max_tokens
    trained_tokens = trained_rollouts * max_tokens
    usd = None
    if usd_per_million_sampled is not None and usd_per_million_training is not None:
        usd = (
            sampled_tokens * usd_per_million_sampled + trained_tokens * usd_per_million_training
        ) / 1e6
    return Estimate(sampled_rollouts, sampled_tokens, trained_rollouts, trained_tokens, usd)


def priced_estimate(*, sampled_rollouts: int, trained_rollouts: int, max_tokens: int) -> Estimate:
    """`estimate` with the prices of `prices.json`."""
    prices = load_prices()
    return estimate(
        sampled_rollouts=sampled_rollouts,
        trained_rollouts=trained_rollouts,
        max_tokens=max_tokens,
        usd_per_million_sampled=prices["usd_per_million_sampled_tokens"],
        usd_per_million_training=prices["usd_per_million_training_tokens"],
    )


def check_budget(spend: Estimate, budget_sampled_tokens: int, backend: str) -> None:
    """In the cloud, refuse a run whose ceiling passes the budget, before any request."""
    if backend == "cloud" and spend.sampled_tokens > budget_sampled_tokens:
        raise CourseConfigError(
            f"this cloud run could sample up to {spend.sampled_tokens:,} tokens "
            f"({spend.rollouts:,} rollouts), over budget_sampled_tokens = "
            f"{budget_sampled_tokens:,}; lower steps or the sizes, or raise "
            "budget_sampled_tokens in the parameters cell if you mean to spend it."
        )


def sampled_tokens(groups: list) -> int:
    """Tokens actually sampled in `groups` (TrajectoryGroups): what the cloud bills."""
    return sum(
        len(transition.ac.tokens)
        for group in groups
        for trajectory in group.trajectories_G
        for transition in trajectory.transitions
    )


def check_spent(spent: int, budget_sampled_tokens: int, backend: str, completed_steps: int) -> None:
    """In the cloud, stop a run (its state already saved) once what it sampled passes the cap."""
    if backend == "cloud" and spent > budget_sampled_tokens:
        raise CourseConfigError(
            f"this cloud run has sampled {spent:,} tokens, over budget_sampled_tokens = "
            f"{budget_sampled_tokens:,}, so it stopped after {completed_steps} steps with its "
            "state saved; raise budget_sampled_tokens and run again to resume."
        )
