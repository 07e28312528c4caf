"""The local stack's test knobs: injected latencies, injected faults, and the sampling seed.

All off by default. The start-up settings (environment variables, see
`local_stack.config.knob_settings_from_env`) are the stack's defaults, for every client. At
runtime a client changes its own latencies and faults through the control plane
(`POST /local/config`); they apply to its own requests only, and go when it resets them
(`DELETE /local/config`) or its process leaves the stack. The seed stays stack-wide: one
random stream samples every client's batched rollouts, so a per-client seed could not make
one client's samples reproducible while others share the batch. Setting it restarts that
stream (which draws each client gets, not how they are distributed). The emulated services
only read the knobs; a service that keeps random state registers a listener to be reseeded.
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

KNOB_NAMES = ("latency", "train_latency", "archive_latency", "faults", "seed")
# What each fault does to one Sail response (`local_stack.sail.service`, `.routes`):
#   failed, expired       it ends with that status, unsampled
#   http500, malformed    its final retrieve answers 500, or a truncated body
#   http429               its create answers 429 (rate limited)
#   timeout               its create is held unanswered (the client's timeout fires first)
#   unauthorized          its create answers 401, as for a refused key
#   checkpoint_expired    its Tinker checkpoint expires as it arrives, before Sail fetches it
FAULT_KINDS = (
    "failed",
    "expired",
    "http500",
    "malformed",
    "http429",
    "timeout",
    "unauthorized",
    "checkpoint_expired",
)
# A response held longer than this would outlast the SDK's default polling budget anyway;
# training steps and archive downloads get the same bound.
MAX_LATENCY_SECONDS = 600.0
MAX_SEED = 2**63 - 1  # what torch.Generator.manual_seed accepts
# Unregistered client names (`local_stack.lanes`) with settings of their own, at most; beyond
# it the least recently set of them are forgotten (back to the defaults), so a flood of
# made-up names cannot grow the stack, nor evict a registered client's settings.
MAX_CLIENTS_WITH_SETTINGS = 1024


@dataclass
class Knobs:
    """Latencies, fault fractions, and the seed.

    `latency`: seconds before a Sail response may report done (a completion window).
    `train_latency`: seconds a Tinker training step (its forward_backward calls and the
    optim_step that ends it) takes at least, as a step on a large model would.
    `archive_latency`: seconds before a download of the client's checkpoint archives (the
    signed-URL stand-in Sail fetches adapters from) starts, as slow storage would.
    """

    latency: float = 0.0
    train_latency: float = 0.0
    archive_latency: float = 0.0
    faults: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    _reseed_listeners: list[Callable[[int], None]] = field(default_factory=list, repr=False)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> Knobs:
        knobs = cls()
        knobs.update(settings)
        return knobs

    def on_reseed(self, listener: Callable[[int], None]) -> None:
        """Call `listener(seed)` whenever a seed is set (even the same one: it restarts)."""
        self._reseed_listeners.append(listener)

    def update(self, changes: Mapping[str, Any]) -> None:
        """Apply `{"latency", "train_latency", "archive_latency", "faults", "seed"}`, all or
        nothing.

        Every value is checked before any is applied, so a refused change changes nothing.
        Faults come as a mapping or as text like `failed=0.1,http500=0.05`; numbers may be
        given as text (that is how they arrive from the environment). Raises ValueError.
        """
        if not isinstance(changes, Mapping):
            raise ValueError("knob settings must be a JSON object")
        unknown = sorted(set(changes) - set(KNOB_NAMES))
        if unknown:
            raise ValueError(f"unknown knobs {unknown}; the knobs are {list(KNOB_NAMES)}")
        latency = _latency("latency", changes.get("latency", self.latency))
        train_latency = _latency("train_latency", changes.get("train_latency", self.train_latency))
        archive_latency = _latency(
            "archive_latency", changes.get("archive_latency", self.archive_latency)
        )
        faults = _faults(changes["faults"]) if "faults" in changes else self.faults
        seed = _seed(changes["seed"]) if "seed" in changes else self.seed
        self.latency, self.train_latency = latency, train_latency
        self.archive_latency = archive_latency
        self.faults, self.seed = faults, seed
        if "seed" in changes:
            for listener in self._reseed_listeners:
                listener(seed)

    def as_dict(self) -> dict[str, Any]:
        return {
            "latency": self.latency,
            "train_latency": self.train_latency,
            "archive_latency": self.archive_latency,
            "faults": dict(self.faults),
            "seed": self.seed,
        }

    def copy(self) -> Knobs:
        """The same values, without the listeners."""
        return Knobs(
            self.latency, self.train_latency, self.archive_latency, dict(self.faults), self.seed
        )

    def draw_fault(self, rng: random.Random) -> str | None:
        """Which fault, if any, one response suffers."""
        u = rng.random()
        for kind in FAULT_KINDS:
            u -= self.faults.get(kind, 0.0)
            if u < 0:
                return kind
        return None


class ClientKnobs:
    """The stack's default knobs and the latencies and faults each client set for itself."""

    def __init__(self, default: Knobs, kept: Callable[[str], bool] = lambda client: False) -> None:
        """`kept(client)`: whether the client is registered, its settings never forgotten
        for room (they go when its process leaves, `local_stack.control.routes`)."""
        self.default = default
        self._kept = kept
        self._own: OrderedDict[str, Knobs] = OrderedDict()

    def of(self, client: str) -> Knobs:
        """What `client`'s requests get: its own settings, else the stack's defaults. Its
        `seed` is the stack's."""
        own = self._own.get(client)
        if own is None:
            return self.default
        own.seed = self.default.seed
        return own

    def update(self, client: str, changes: Mapping[str, Any]) -> None:
        """Apply `changes` for `client`, all or nothing (see `Knobs.update`); a `seed`
        restarts the stack's random streams for everyone."""
        if not isinstance(changes, Mapping):
            raise ValueError("knob settings must be a JSON object")
        seed = _seed(changes["seed"]) if "seed" in changes else None
        own = self.of(client).copy()
        own.update({name: value for name, value in changes.items() if name != "seed"})
        if seed is not None:
            self.default.update({"seed": seed})
        self.reset(client)
        if own.as_dict() != {**self.default.as_dict(), "seed": own.seed}:
            self._own[client] = own  # only what differs from the defaults is kept
            self._forget_unregistered_beyond(MAX_CLIENTS_WITH_SETTINGS)

    def _forget_unregistered_beyond(self, most: int) -> None:
        unregistered = [name for name in self._own if not self._kept(name)]  # oldest first
        for name in unregistered[: max(0, len(unregistered) - most)]:
            del self._own[name]

    def reset(self, client: str) -> None:
        """`client` gets the stack's defaults again."""
        self._own.pop(client, None)


def _number(name: str, value: Any, low: float, high: float) -> float:
    """A finite number in [low, high], from a JSON number or its text."""
    number = math.nan
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            number = float(value)
        except (ValueError, OverflowError):
            pass
    if not (math.isfinite(number) and low <= number <= high):
        raise ValueError(f"{name} must be a number between {low} and {high}, got {value!r}")
    return number


def _latency(name: str, value: Any) -> float:
    return _number(name, value, 0.0, MAX_LATENCY_SECONDS)


def _faults(value: Any) -> dict[str, float]:
    if isinstance(value, str):
        pairs = [item.split("=", 1) for item in value.split(",") if item.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError(f"faults must look like 'failed=0.1,http500=0.05', got {value!r}")
        value = {kind.strip(): share for kind, share in pairs}
    if not isinstance(value, Mapping):
        raise ValueError(f"faults must be an object of fractions, got {value!r}")
    unknown = sorted(set(value) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"unknown fault kinds {unknown}; the kinds are {list(FAULT_KINDS)}")
    faults = {kind: _number(f"faults.{kind}", share, 0.0, 1.0) for kind, share in value.items()}
    if sum(faults.values()) > 1:
        raise ValueError(f"fault fractions must sum to at most 1, got {sum(faults.values())}")
    return faults


def _seed(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise ValueError(f"seed must be an integer between 0 and {MAX_SEED}, got {value!r}")
    return value
