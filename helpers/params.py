"""Checks for notebook parameters, run before anything touches a server.

Every parameter of every notebook has a range, written once as a rule in `RULES` (with
`NOTEBOOK_RULES` for the few notebooks where a parameter's range differs). Each notebook's
check cell passes all its parameters to `check_params`, which imports nothing heavy. A value
outside its range raises `CourseConfigError` with one sentence naming the parameter and the
range, so a bad papermill `-p` fails in a second instead of mid-run (or, worse, "succeeds"
having sampled nothing). The ranges are what the services accept, what each backend's data
holds, and what a kernel can hold; `tests/test_params.py` checks them against the first two.

Comparisons are written `low <= value <= high`, which NaN fails.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

from helpers.defaults import with_defaults
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
# The held-out scores notebook 04 stores, which notebook 05 compares.
HELD_OUT_METRICS = ("reward", "correct", "format", "correct_given_format")


def check_backend(backend: str) -> None:
    """Fail fast, before any remote call, if `backend` or its keys are unusable."""
    OneOf(BACKENDS)("backend", backend)
    if backend == "cloud":
        for variable in ("TINKER_API_KEY", "SAIL_API_KEY"):
            if not os.environ.get(variable):
                raise CourseConfigError(
                    f"backend='cloud' needs the environment variable {variable}; "
                    "set it in the shell that starts Jupyter, or use backend='local'."
                )
        if not os.environ["TINKER_API_KEY"].startswith("tml-"):
            raise CourseConfigError(
                "TINKER_API_KEY does not start with 'tml-', so it is not a Tinker key; "
                "copy it again from the Tinker console."
            )


@dataclass(frozen=True)
class Checking:
    """What a rule sees besides its own value: which notebook, on which backend, with which
    parameters (checked in the notebook's order, so those before it already passed)."""

    notebook: str
    backend: str
    values: dict[str, object]

    def value(self, name: str) -> object:
        """Parameter `name`, with None replaced by the backend's default for it."""
        return with_defaults(self.backend, self.notebook, **{name: self.values[name]})[name]


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
        if self.none_ok and value is None:
            return
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not self.low <= value <= self.high
        ):
            allowed = f"a whole number from {self.low} to {self.high}"
            _refuse(name, allowed, value, self.why, self.none_ok)


@dataclass(frozen=True)
class Number:
    """A finite int or float in [low, high], or in (low, high] if `above_low` (a learning
    rate of 0 would train nothing); None (the backend's default) if `none_ok`."""

    low: float
    high: float
    above_low: bool = False
    none_ok: bool = False

    def __call__(self, name: str, value: object, checking: Checking | None = None) -> None:
        if self.none_ok and value is None:
            return
        if not _is_number(value, self.low, self.high, self.above_low):
            allowed = (
                f"a number greater than {self.low:g} and at most {self.high:g}"
                if self.above_low
                else f"a number from {self.low:g} to {self.high:g}"
            )
            _refuse(name, allowed, value, none_ok=self.none_ok)


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


@dataclass(frozen=True)
class Matches:
    """A string that `pattern` matches whole; `allowed` says which, in words."""

    pattern: str
    allowed: str

    def __call__(self, name: str, value: object, checking: Checking | None = None) -> None:
        if not isinstance(value, str) or not re.fullmatch(self.pattern, value):
            _refuse(name, self.allowed, value)


def backend_with_keys(name: str, value: object, checking: Checking) -> None:
    check_backend(value)


def temperature(name: str, value: object, checking: Checking) -> None:
    if value == 0 and not isinstance(value, bool):
        return  # greedy
    if not _is_number(value, MIN_TEMPERATURE, MAX_TEMPERATURE):
        allowed = f"0 (greedy) or a number from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}"
        _refuse(name, allowed, value)


def completion_window(name: str, value: object, checking: Checking) -> None:
    if value in RETIRED_WINDOWS:
        raise CourseConfigError(f"{name} {value!r} is retired; use 'balanced' or 'flex'.")
    OneOf(COMPLETION_WINDOWS)(name, value)


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

    return rule


def fewer_than_steps(name: str, value: object, checking: Checking) -> None:
    """Notebook 06's staleness: k = 1 is its second run already; the third shows what more
    batches in flight do, and a run of `steps` steps has at most steps - 1 in flight."""
    Whole(2, checking.value("steps") - 1, why="at most steps - 1")(name, value)


STEPS = Whole(1, 10_000, none_ok=True)
# The first step fills notebook 06's pipeline; two more show its pace.
PIPELINE_STEPS = Whole(3, 10_000, none_ok=True)
# Notebook 06 and 07's simulated waits: longer ones would make a run take many minutes.
SIMULATED_SECONDS = Number(0.0, 60.0)
RUN_PATTERN = r"[A-Za-z0-9_.*?\[\]-]{1,64}"  # a glob that can only match a run's folder

# The rule of each parameter, the same in every notebook that has it.
RULES: dict[str, Rule] = {
    "backend": backend_with_keys,
    "example_index": problems(TRAIN_PROBLEMS, "training", index=True),
    "ttl_seconds": Whole(MIN_TTL_SECONDS, MAX_TTL_SECONDS, why="1 hour to 10 years"),
    "seed": Whole(0, 2**32 - 1),
    "steps": STEPS,
    # GRPO compares samples of the same prompt: one sample has nothing to compare with.
    "group_size": Whole(2, MAX_GROUP_SIZE),
    "groups": problems(TRAIN_PROBLEMS, "training"),
    "groups_per_step": problems(TRAIN_PROBLEMS, "training"),
    "learning_rate": Number(0.0, 1.0, above_low=True, none_ok=True),
    "max_tokens": max_tokens,
    "temperature": temperature,
    "completion_window": completion_window,
    "run_name": Matches(
        r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}",
        "1-64 letters, digits, '.', '_' or '-' (it names a folder under runs/)",
    ),
    "eval_problems": problems(HELD_OUT_PROBLEMS, "held-out", none_ok=True),
    "eval_samples": Whole(1, MAX_GROUP_SIZE, none_ok=True),
    "budget_sampled_tokens": Whole(0, 10**12),
    "runs": Matches(
        rf"\s*{RUN_PATTERN}(\s+{RUN_PATTERN}){{0,63}}\s*",
        "1 to 64 run names or glob patterns separated by spaces, each made of letters, "
        "digits, '.', '_', '-', '*', '?', '[' and ']' (they match folder names under runs/)",
    ),
    "metric": OneOf(HELD_OUT_METRICS),
    "smoothing": Whole(1, 100),  # a moving average that still follows the curve
    "max_staleness": fewer_than_steps,
    "balanced_latency_s": SIMULATED_SECONDS,
    "flex_latency_s": SIMULATED_SECONDS,
    "flex_steps": PIPELINE_STEPS,
    "train_latency_s": SIMULATED_SECONDS,
    "simulated_boot_seconds": SIMULATED_SECONDS,
    "short_run_steps": STEPS,
    "lora_name": Matches(
        r"[a-z0-9][a-z0-9-]{0,62}[a-z0-9]",
        "2-64 characters of a-z, 0-9 and '-', starting and ending with a letter or digit "
        "(Sail's rule for LoRA names)",
    ),
    # Notebook 08's tables stay readable: at most the cloud's held-out problems, anywhere.
    "parity_problems": Whole(1, 64),
    "table_problems": Whole(1, HELD_OUT_PROBLEMS["cloud"]),
    "keep_on_sail": OneOf((True, False)),
}
# Where a notebook's rule for a parameter differs from the one above.
NOTEBOOK_RULES: dict[str, dict[str, Rule]] = {
    # No rollouts to compare, or none trained on: a group of one is allowed.
    "01_scoring": {"group_size": Whole(1, MAX_GROUP_SIZE)},
    "02_snapshot_and_serve": {"group_size": Whole(1, MAX_GROUP_SIZE)},
    # It reads what a backend made without calling it, so it needs no keys.
    "05_compare_runs": {"backend": OneOf(BACKENDS)},
    "06_faster_loops": {"steps": PIPELINE_STEPS},
    # Each rollout starts a sandbox; max_tokens only reaches the cloud (locally a script
    # answers), so its range is always the cloud's.
    "07_sandboxed_rollouts": {
        "group_size": Whole(1, 16),
        "max_tokens": Whole(1, CONTEXT_TOKENS["cloud"], why=CONTEXT_OF["cloud"]),
    },
}
# Pairs of parameters whose product is a number of rollouts in flight at once.
BATCHES = (
    ("groups", "group_size"),
    ("group_size", "groups_per_step"),
    ("eval_problems", "eval_samples"),
)


def check_params(notebook: str, **values: object) -> None:
    """Every parameter of `notebook` (its file name without `.ipynb`), in the order given:
    the check cell passes them in the order its parameters cell lists them.

    None, where a rule allows it, stands for the backend's default, which the checks that
    relate two parameters use."""
    checking = Checking(notebook, values["backend"], values)
    for name, value in values.items():
        rule = NOTEBOOK_RULES.get(notebook, {}).get(name) or RULES[name]
        rule(name, value, checking)
    for names in BATCHES:
        if set(names) <= set(values):
            first, second = (checking.value(name) for name in names)
            if first * second > MAX_ROLLOUTS_PER_BATCH:
                raise CourseConfigError(
                    f"{names[0]} x {names[1]} must be at most {MAX_ROLLOUTS_PER_BATCH} "
                    f"rollouts in flight at once, not {first} x {second} = {first * second}."
                )
