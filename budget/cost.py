"""What a notebook will spend, printed before it spends it, and a cap that holds in the cloud.

An estimate is a ceiling from the parameters alone: every rollout samples at most
`max_tokens`, and a trained rollout's datum holds its prompt plus that many completion
tokens. Money is shown only with a known price (`prices.json` beside this file names its date
and source); none is invented. In the cloud a run whose sampled-token ceiling passes its
budget stops before its first paid request, in one sentence; locally the estimate is only
printed. Counted beside the tokens, with no price known: the adapter archive Tinker builds and
Sail downloads per sampler checkpoint served (its size assumed, `ASSUMED_ADAPTER_ARCHIVE_GB`),
PEFT exports hosted on Sail (notebook 09), forward passes outside training, and Sailboxes
(`describe_sandboxes`). The budget caps sampled tokens only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kimi.architecture import KIMI_K26
from kimi.converter import archive_parameters

PRICES_PATH = Path(__file__).resolve().parent / "prices.json"
# An assumption, not a documented size: a rank-32 Kimi K2.6 LoRA has the parameters the
# cookbook's `get_lora_param_count` gives (about 4.7 billion), 2 bytes each in bf16, so each
# sampler checkpoint's archive is about 9.4 GB, built by Tinker and downloaded by Sail once per
# checkpoint served. `kimi.converter` is the one source of that size (and, through
# `kimi.adapter_size`, of the export's, which needs torch: computed only where needed).
ASSUMED_RANK = 32
ASSUMED_ADAPTER_PARAMETERS = archive_parameters(KIMI_K26, ASSUMED_RANK)
ASSUMED_ADAPTER_ARCHIVE_GB = ASSUMED_ADAPTER_PARAMETERS * 2 / 1e9


class OverBudgetError(ValueError):
    """A cloud run that could sample, or has sampled, more tokens than its budget allows; the
    message says by how much and which parameter raises the cap."""


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
        training = (
            f"training on at most {self.trained_rollouts:,} rollouts "
            f"({self.trained_completion_tokens:,} completion tokens plus their prompts)"
            if self.trained_rollouts
            else "no training"
        )
        return (
            f"estimate: {self.rollouts:,} rollouts, at most {self.sampled_tokens:,} sampled "
            f"tokens; {training}; {money}"
        )

    def _ipython_display_(self) -> None:
        """A notebook cell ending in `estimate_and_cap(...)` shows nothing more: the call has
        already printed `describe()`, and the dataclass repr would repeat it as a stray line."""


def load_prices(path: Path = PRICES_PATH) -> dict:
    """The prices file: USD per million sampled tokens in each completion window and per
    million training tokens, and per Sailbox creation (null: not known)."""
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


def sampled_price(prices: dict, sampled_rollouts: int, flex_rollouts: int) -> float | None:
    """USD per million sampled tokens over a run whose `flex_rollouts` of `sampled_rollouts`
    sample through flex and the rest through balanced; None unless every price needed is known."""
    balanced = prices["usd_per_million_sampled_tokens_balanced"]
    flex = prices["usd_per_million_sampled_tokens_flex"]
    if sampled_rollouts == 0:
        return 0.0
    if (flex_rollouts and flex is None) or (flex_rollouts < sampled_rollouts and balanced is None):
        return None
    flex_share = flex_rollouts / sampled_rollouts
    return (flex or 0.0) * flex_share + (balanced or 0.0) * (1 - flex_share)


def priced_estimate(
    *, sampled_rollouts: int, trained_rollouts: int, max_tokens: int, flex_rollouts: int = 0
) -> Estimate:
    """`estimate` with the prices of `prices.json`, each window's rollouts at its own price."""
    prices = load_prices()
    return estimate(
        sampled_rollouts=sampled_rollouts,
        trained_rollouts=trained_rollouts,
        max_tokens=max_tokens,
        usd_per_million_sampled=sampled_price(prices, sampled_rollouts, flex_rollouts),
        usd_per_million_training=prices["usd_per_million_training_tokens"],
    )


def check_budget(spend: Estimate, budget_sampled_tokens: int, backend: str) -> None:
    """In the cloud, refuse a run whose ceiling passes the budget, before any request."""
    if backend == "cloud" and spend.sampled_tokens > budget_sampled_tokens:
        raise OverBudgetError(
            f"this cloud run could sample up to {spend.sampled_tokens:,} tokens "
            f"({spend.rollouts:,} rollouts), over budget_sampled_tokens = "
            f"{budget_sampled_tokens:,}; lower the parameters that size it, or raise "
            "budget_sampled_tokens in the parameters cell if you mean to spend it."
        )


def estimate_and_cap(
    backend: str,
    budget_sampled_tokens: int,
    *,
    max_tokens: int,
    sampled: dict[str, int],
    trained_rollouts: int = 0,
    adapter_archives: int = 0,
    forward_rollouts: int = 0,
    flex_rollouts: int = 0,
    exports: int = 0,
) -> Estimate:
    """Print what a notebook can spend, before its first request; in the cloud, refuse it if
    that passes the budget. `sampled` gives each part of the run with the rollouts it
    samples (a part that samples nothing is left out of the list), `flex_rollouts` how many
    of them sample through flex; `adapter_archives` the sampler checkpoints it serves through
    Sail, `forward_rollouts` the rollouts Tinker scores with forward passes, outside training,
    and `exports` the PEFT exports it uploads to Sail as named LoRAs."""
    spend = priced_estimate(
        sampled_rollouts=sum(sampled.values()),
        trained_rollouts=trained_rollouts,
        max_tokens=max_tokens,
        flex_rollouts=flex_rollouts,
    )
    parts = ", ".join(f"{count:,} {part}" for part, count in sampled.items() if count)
    print(spend.describe())
    print(f"  rollouts, each at most {max_tokens:,} tokens: {parts or 'none'}")
    if backend == "cloud" and spend.rollouts:
        print("  a rollout cut at its timeout counts in full: Sail may bill what it sampled for it")
    if adapter_archives or forward_rollouts or exports:
        others = describe_other_costs(backend, adapter_archives, forward_rollouts, exports)
        print(f"  also: {others}")
    check_budget(spend, budget_sampled_tokens, backend)
    return spend


def describe_other_costs(
    backend: str, adapter_archives: int, forward_rollouts: int, exports: int = 0
) -> str:
    """The costs beside sampled and trained tokens: adapter archives, forward passes, and
    PEFT exports uploaded to Sail and hosted there as named LoRAs."""
    archives = f"{adapter_archives:,} adapter archives (one per sampler checkpoint served)"
    if backend == "cloud":
        archives += (
            f", about {adapter_archives * ASSUMED_ADAPTER_ARCHIVE_GB:,.0f} GB built by Tinker"
            f" and downloaded by Sail (assumed {ASSUMED_ADAPTER_ARCHIVE_GB:.1f} GB each: a"
            f" rank-32 Kimi K2.6 LoRA of about {ASSUMED_ADAPTER_PARAMETERS / 1e9:.1f} billion bf16"
            " parameters)"
        )
    parts = [archives]
    if forward_rollouts:  # a notebook that scores nothing outside training says nothing of it
        parts.append(f"at most {forward_rollouts:,} rollouts scored by Tinker forward passes")
    if exports:
        parts.append(describe_exports(backend, exports))
    return "; ".join(parts) + "; no price known for any of these"


def describe_exports(backend: str, exports: int) -> str:
    """PEFT exports uploaded to Sail, with their size in the cloud (the converter's count)."""
    uploads = f"{exports:,} PEFT export uploaded to Sail and hosted there as a named LoRA"
    if backend != "cloud":
        return uploads
    from kimi.adapter_size import estimate_kimi_k26

    export_gb = estimate_kimi_k26(ASSUMED_RANK).export_bytes / 1e9
    return (
        f"{uploads} while it is kept (about {exports * export_gb:,.1f} GB uploaded: the "
        f"converter copies each expert's shared factor, so a rank-{ASSUMED_RANK} export is "
        f"{export_gb:.1f} GB against the archive's {ASSUMED_ADAPTER_ARCHIVE_GB:.1f} GB)"
    )


def describe_sandboxes(lifetimes: dict[int, int], backend: str) -> str:
    """Sandboxes a notebook creates, as {lifetime budget in seconds: how many}. Each ends at
    its `cleanup`, and at the latest when its budget runs out, so the sum of the budgets is
    the most sandbox time the notebook can hold (it usually holds seconds of it). Sail bills
    a Sailbox once when it is created, then by the usage it observes while it runs, not by
    the hour (`Sailbox.create`'s docstring): only the creations can have a price here."""
    count = sum(lifetimes.values())
    seconds = sum(lifetime * n for lifetime, n in lifetimes.items())
    if backend != "cloud":
        return f"sandboxes: {count} local ones, holding at most {seconds:,} sandbox-seconds"
    per_creation = load_prices()["usd_per_sailbox_creation_size_s"]
    creations = (
        "no price known"
        if per_creation is None
        else f"${count * per_creation:,.2f} for the creations"
    )
    return (
        f"Sailboxes: {count} of size s, holding at most {seconds:,} Sailbox-seconds "
        f"(each ends at its cleanup, or when its lifetime budget runs out), and {count} "
        f"one-time creation charges (Sail charges each Sailbox once when it is created); "
        f"{creations}; the time they run is billed by the usage Sail observes (no unit price "
        "known); budget_sampled_tokens does not cap them"
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
        raise OverBudgetError(
            f"this cloud run has sampled {spent:,} tokens, over budget_sampled_tokens = "
            f"{budget_sampled_tokens:,}, so it stopped after {completed_steps} steps with its "
            "state saved; raise budget_sampled_tokens and run again to resume."
        )
