"""The rules notebook parameters must pass, run before anything touches a server.

A leaf: it imports only the course's errors and (for the cloud check) `helpers.logins`. A
value out of range raises `CourseConfigError` with one sentence naming the parameter and the
range, so a bad papermill `-p` fails in a second, not mid-run. The ranges are what the
services accept, what each backend's data holds and what a kernel can hold. Comparisons are
written `low <= value <= high`, which NaN fails.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn, cast

from helpers.errors import CourseConfigError

BACKENDS = ("local", "cloud")
COMPLETION_WINDOWS = ("balanced", "flex")
RETIRED_WINDOWS = ("priority", "15m")

# Sail's sampling temperature; the local stack refuses the same values. Above 0 it also
# refuses tiny temperatures, which overflow the scaled logits (0 itself means greedy).
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 2.0
# Prompt plus completion: the local tiny model's context, and Kimi K2.6's (256K).
CONTEXT_TOKENS = {"local": 256, "cloud": 262_144}
CONTEXT_OF = {"local": "the local model's context", "cloud": "Kimi K2.6's context"}
# What `helpers.connect` loads: the local arithmetic set, or the slice of orca-math.
TRAIN_PROBLEMS = {"local": 1074, "cloud": 2000}
HELD_OUT_PROBLEMS = {"local": 399, "cloud": 200}
# Tinker keeps a checkpoint from one hour to ten years.
MIN_TTL_SECONDS = 3600
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600
# Every rollout of a batch is in flight at once: the kernel and the services handle this many.
MAX_GROUP_SIZE = 64
MAX_ROLLOUTS_PER_BATCH = 4096
# The held-out scores notebook 05 stores, which notebook 06 compares.
HELD_OUT_METRICS = ("reward", "correct", "format", "correct_given_format")


def check_backend(backend: object) -> str:
    """Fail fast, before any remote call, if `backend` or its logins are unusable. In the
    cloud, returns which logins the SDKs will use (never the secrets), e.g. "Tinker:
    TINKER_API_KEY (a JWT); Sail: the login stored by `sail auth login`"."""
    OneOf(BACKENDS)("backend", backend)
    if backend != "cloud":
        return "the local stack's own keys"
    from helpers.logins import sail_login, tinker_login

    return f"Tinker: {tinker_login()}; Sail: {sail_login()}"


@dataclass(frozen=True)
class Checking:
    """What a rule sees besides its own value: the backend, the notebook's parameters
    (checked in the notebook's order, so those before it already passed), and what None
    stands for on this backend."""

    backend: str
    values: dict[str, object]
    defaults: dict[str, object]

    def value(self, name: str) -> object:
        """Parameter `name`, with None replaced by the backend's default for it."""
        value = self.values[name]
        return self.defaults[name] if value is None else value

    def whole(self, name: str) -> int:
        """Parameter `name`, which its rule (checked before this one's) passed as a whole number."""
        return cast(int, self.value(name))


def _refuse(
    name: str, allowed: str, value: object, why: str = "", none_ok: bool = False
) -> NoReturn:
    reason = f" ({why})" if why else ""
    default = ", or None for the backend's default" if none_ok else ""
    raise CourseConfigError(f"{name} must be {allowed}{reason}{default}, not {value!r}.")


# Each rule below is called as rule(name, value, checking) and refuses a value out of range.
Rule = Callable[[str, object, Checking], None]


@dataclass(frozen=True)
class Whole:
    """An int (not a bool) from `low` to `high`, or None (the backend's default) if `none_ok`."""

    low: int
    high: int
    why: str = ""
    none_ok: bool = False

    def __call__(self, name: str, value: object, checking: Checking | None = None) -> None:
        if (self.none_ok and value is None) or (
            isinstance(value, int)
            and not isinstance(value, bool)
            and self.low <= value <= self.high
        ):
            return
        _refuse(name, f"a whole number from {self.describe()}", value, self.why, self.none_ok)

    def describe(self) -> str:
        return f"{self.low} to {self.high}"


@dataclass(frozen=True)
class Number:
    """A finite int or float in [low, high], or in (low, high] if `above_low` (a learning
    rate of 0 would train nothing); None (the backend's default) if `none_ok`."""

    low: float
    high: float
    above_low: bool = False
    none_ok: bool = False

    def __call__(self, name: str, value: object, checking: Checking | None = None) -> None:
        if (self.none_ok and value is None) or _is_number(
            value, self.low, self.high, self.above_low
        ):
            return
        low = (
            f"greater than {self.low:g} and at most" if self.above_low else f"from {self.low:g} to"
        )
        _refuse(name, f"a number {low} {self.high:g}", value, none_ok=self.none_ok)

    def describe(self) -> str:
        low = f"above {self.low:g} and at most" if self.above_low else f"{self.low:g} to"
        return f"{low} {self.high:g}"


def _is_number(value: object, low: float, high: float, above_low: bool = False) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return (low < value if above_low else low <= value) and value <= high


@dataclass(frozen=True)
class OneOf:
    """One of `choices`, of the same type (so 1 is not True)."""

    choices: tuple

    def __call__(self, name: str, value: object, checking: Checking | None = None) -> None:
        if not any(type(value) is type(choice) and value == choice for choice in self.choices):
            _refuse(name, "one of " + ", ".join(map(repr, self.choices)), value)

    def describe(self) -> str:
        return " or ".join(f'"{c}"' if isinstance(c, str) else repr(c) for c in self.choices)


@dataclass(frozen=True)
class Matches:
    """A string that `pattern` matches whole; `allowed` says which, in words."""

    pattern: str
    allowed: str
    none_ok: bool = False

    def __call__(self, name: str, value: object, checking: Checking | None = None) -> None:
        matches = isinstance(value, str) and re.fullmatch(self.pattern, value)
        if not (self.none_ok and value is None) and not matches:
            _refuse(name, self.allowed, value)

    def describe(self) -> str:
        return self.allowed


def described(text: str) -> Callable[[Rule], Rule]:
    """Give a rule written as a function the `describe()` the rule classes have."""

    def give(rule: Rule) -> Rule:
        rule.describe = lambda: text  # type: ignore[attr-defined]
        return rule

    return give


RUN_NAME = Matches(
    r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
    "1-64 letters, digits, '.', '_' or '-' (it names a folder under runs/)",
)
# runs/local-stack is the local stack's storage (checkpoints, its log): no run may write there.
STACK_FOLDER = "local-stack"


@described(RUN_NAME.allowed + ", not local-stack")
def run_name(name: str, value: object, checking: Checking) -> None:
    RUN_NAME(name, value)
    if str(value).lower() == STACK_FOLDER:  # also on a case-insensitive file system
        raise CourseConfigError(
            f"{name} {value!r} is the local stack's own folder under runs/; pick another name."
        )


def backend_with_keys(name: str, value: object, checking: Checking) -> None:
    check_backend(value)


@described(f"0 (greedy), or {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}")
def temperature(name: str, value: object, checking: Checking) -> None:
    if value == 0 and not isinstance(value, bool):
        return  # greedy
    if not _is_number(value, MIN_TEMPERATURE, MAX_TEMPERATURE):
        allowed = f"0 (greedy) or a number from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}"
        _refuse(name, allowed, value)


@described(" or ".join(f'"{window}"' for window in COMPLETION_WINDOWS))
def completion_window(name: str, value: object, checking: Checking) -> None:
    if value in RETIRED_WINDOWS:
        raise CourseConfigError(f"{name} {value!r} is retired; use 'balanced' or 'flex'.")
    OneOf(COMPLETION_WINDOWS)(name, value)


@described(
    f"1 to the model's context ({CONTEXT_TOKENS['local']} locally, "
    f"{CONTEXT_TOKENS['cloud']} in the cloud)"
)
def max_tokens(name: str, value: object, checking: Checking) -> None:
    """At most the model's context: the prompt takes part of it, and sampling stops there."""
    context = CONTEXT_TOKENS[checking.backend]
    Whole(1, context, why=CONTEXT_OF[checking.backend], none_ok=True)(name, value)


def problems(
    counts: dict[str, int], split: str, *, index: bool = False, none_ok: bool = False
) -> Rule:
    """A rule: how many of the `split` problems that `helpers.connect(backend)` loads (at
    most all of them), or with `index` an index into them."""

    def rule(name: str, value: object, checking: Checking) -> None:
        count = counts[checking.backend]
        why = f"the {checking.backend} backend has {count} {split} problems"
        Whole(0 if index else 1, count - 1 if index else count, why, none_ok)(name, value)

    low, last = (0, -1) if index else (1, 0)
    local, cloud = (counts[backend] + last for backend in BACKENDS)
    return described(f"{low} to {local} ({cloud} in the cloud)")(rule)


@described("2 to steps - 1")
def fewer_than_steps(name: str, value: object, checking: Checking) -> None:
    """Notebook 07's staleness: k = 1 is its second run already; the third shows what more
    batches in flight do, and a run of `steps` steps has at most steps - 1 in flight."""
    Whole(2, checking.whole("steps") - 1, why="at most steps - 1")(name, value)


def training_pool(counts: dict[str, int]) -> Rule:
    """Notebook 07's fixed problems: at most every training problem the backend loads, and
    at least one step's worth (`groups_per_step`), since each step draws that many."""
    loaded = problems(counts, "training")

    def rule(name: str, value: object, checking: Checking) -> None:
        loaded(name, value, checking)
        step = checking.whole("groups_per_step")
        if cast(int, value) < step:  # `loaded` passed it as a whole number
            _refuse(name, "at least groups_per_step", value, f"each step draws {step} of them")

    loaded_range = loaded.describe()  # type: ignore[attr-defined]
    return described(f"{loaded_range}, at least groups_per_step")(rule)


STEPS = Whole(1, 10_000, none_ok=True)
# The first step fills notebook 07's pipeline; two more show its pace.
PIPELINE_STEPS = Whole(3, 10_000, none_ok=True)
# Notebook 07 and 08's simulated waits: longer ones would make a run take many minutes.
SIMULATED_SECONDS = Number(0.0, 60.0)
RUN_PATTERN = r"[A-Za-z0-9_.*?\[\]-]{1,64}"  # a glob that can only match a run's folder

# Pairs of parameters whose product is a number of rollouts in flight at once.
BATCHES = (
    ("groups", "group_size"),
    ("group_size", "groups_per_step"),
    ("eval_problems", "eval_samples"),
    ("train_problems", "eval_samples"),
)


def check_rollouts_in_flight(checking: Checking) -> None:
    """Each pair of `BATCHES` the notebook has multiplies to at most MAX_ROLLOUTS_PER_BATCH."""
    for names in BATCHES:
        if set(names) <= set(checking.values):
            first, second = (checking.whole(name) for name in names)
            if first * second > MAX_ROLLOUTS_PER_BATCH:
                raise CourseConfigError(
                    f"{names[0]} x {names[1]} must be at most {MAX_ROLLOUTS_PER_BATCH} "
                    f"rollouts in flight at once, not {first} x {second} = {first * second}."
                )
