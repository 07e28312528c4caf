"""Checks for notebook parameters, run before anything touches a server.

Every parameter of every notebook has a range; each notebook's check cell calls the
function here named after it, which imports nothing heavy. A value outside its range
raises `CourseConfigError` with one sentence naming the parameter and the range, so a bad
papermill `-p` fails in a second instead of mid-run (or, worse, "succeeds" having
sampled nothing). The ranges are what the services accept, what each backend's data
holds, and what a kernel can hold; `tests/test_params.py` checks them against the first two.

Comparisons are written `low <= value <= high`, which NaN fails.
"""

from __future__ import annotations

import math
import os
import re

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
# What `helpers.connect` loads: the local arithmetic set, or the slice of orca-math.
TRAIN_PROBLEMS = {"local": 1467, "cloud": 2000}
HELD_OUT_PROBLEMS = {"local": 399, "cloud": 200}
# Tinker keeps a checkpoint from one hour to ten years.
MIN_TTL_SECONDS = 3600
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600
# Sizes the kernel and the services handle: every rollout of a batch is in flight at
# once, and a notebook-04 rollout also starts a sandbox.
MAX_GROUP_SIZE = 64
MAX_SANDBOXED_GROUP_SIZE = 16
MAX_ROLLOUTS_PER_BATCH = 4096
MAX_STEPS = 10_000
MAX_LEARNING_RATE = 1.0
MAX_SEED = 2**32 - 1
MAX_BOOT_SECONDS = 60.0
MAX_BUDGET_SAMPLED_TOKENS = 10**12


def check_backend(backend: str) -> None:
    """Fail fast, before any remote call, if `backend` or its keys are unusable."""
    check_backend_name(backend)
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


def check_backend_name(backend: str) -> None:
    """For notebooks that read what a backend made without calling it: no keys needed."""
    if backend not in BACKENDS:
        raise CourseConfigError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, not {backend!r}."
        )


def _refuse(name: str, allowed: str, value: object, why: str, none_ok: bool) -> None:
    reason = f" ({why})" if why else ""
    default = ", or None for the backend's default" if none_ok else ""
    raise CourseConfigError(f"{name} must be {allowed}{reason}{default}, not {value!r}.")


def check_whole_number(
    name: str, value: object, low: int, high: int, *, why: str = "", none_ok: bool = False
) -> None:
    """`value` is an int (not a bool) from `low` to `high`, or None when `none_ok`."""
    if none_ok and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        _refuse(name, f"a whole number from {low} to {high}", value, why, none_ok)


def check_number(
    name: str,
    value: object,
    low: float,
    high: float,
    *,
    above_low: bool = False,
    none_ok: bool = False,
) -> None:
    """`value` is a finite int or float in [low, high] (or (low, high] when `above_low`)."""
    if none_ok and value is None:
        return
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    in_range = is_number and (low < value if above_low else low <= value) and value <= high
    if not (in_range and math.isfinite(value)):
        allowed = (
            f"a number greater than {low:g} and at most {high:g}"
            if above_low
            else f"a number from {low:g} to {high:g}"
        )
        _refuse(name, allowed, value, "", none_ok)


def check_completion_window(value: object) -> None:
    if value in RETIRED_WINDOWS:
        raise CourseConfigError(
            f"completion_window {value!r} is retired; use 'balanced' or 'flex'."
        )
    if value not in COMPLETION_WINDOWS:
        raise CourseConfigError(f"completion_window must be 'balanced' or 'flex', not {value!r}.")


def check_run_name(value: object) -> None:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
        raise CourseConfigError(
            "run_name must be 1-64 letters, digits, '.', '_' or '-' (it names a folder "
            f"under runs/), not {value!r}."
        )


def check_temperature(value: object) -> None:
    if value == 0 and not isinstance(value, bool):
        return  # greedy
    try:
        check_number("temperature", value, MIN_TEMPERATURE, MAX_TEMPERATURE)
    except CourseConfigError:
        raise CourseConfigError(
            f"temperature must be 0 (greedy) or a number from {MIN_TEMPERATURE:g} to "
            f"{MAX_TEMPERATURE:g}, not {value!r}."
        ) from None


def check_max_tokens(value: object, backend: str, *, none_ok: bool = True) -> None:
    """At most the model's context: the prompt takes part of it, and sampling stops there."""
    model = "the local model's context" if backend == "local" else "Kimi K2.6's context"
    check_whole_number("max_tokens", value, 1, CONTEXT_TOKENS[backend], why=model, none_ok=none_ok)


def check_group_size(value: object, low: int, high: int = MAX_GROUP_SIZE) -> None:
    check_whole_number("group_size", value, low, high)


def check_problem_index(name: str, value: object, backend: str) -> None:
    """An index into the training problems that `helpers.connect(backend)` loads."""
    count = TRAIN_PROBLEMS[backend]
    check_whole_number(name, value, 0, count - 1, why=_holds(backend, count, "training"))


def _holds(backend: str, count: int, split: str) -> str:
    return f"the {backend} backend has {count} {split} problems"


def check_batch(names: tuple[str, str], values: tuple[int, int]) -> None:
    """Every rollout of a batch is in flight at once, so their number is bounded too."""
    total = values[0] * values[1]
    if total > MAX_ROLLOUTS_PER_BATCH:
        raise CourseConfigError(
            f"{names[0]} x {names[1]} must be at most {MAX_ROLLOUTS_PER_BATCH} rollouts "
            f"in flight at once, not {values[0]} x {values[1]} = {total}."
        )


def check_scoring_params(*, backend: str, example_index: int, group_size: int) -> None:
    """Every parameter of notebook 01 (no rollouts: a group of one environment is allowed)."""
    check_backend(backend)
    check_problem_index("example_index", example_index, backend)
    check_group_size(group_size, 1)


def check_serving_params(
    *,
    backend: str,
    ttl_seconds: int,
    group_size: int,
    max_tokens: int | None,
    temperature: float,
    completion_window: str,
    example_index: int,
    budget_sampled_tokens: int,
) -> None:
    """Every parameter of notebook 02, in the order its parameters cell lists them."""
    check_backend(backend)
    check_whole_number(
        "ttl_seconds", ttl_seconds, MIN_TTL_SECONDS, MAX_TTL_SECONDS, why="1 hour to 10 years"
    )
    check_group_size(group_size, 1)
    check_max_tokens(max_tokens, backend)
    check_temperature(temperature)
    check_completion_window(completion_window)
    check_problem_index("example_index", example_index, backend)
    check_budget_param(budget_sampled_tokens)


def check_training_params(
    *,
    backend: str,
    steps: int | None,
    group_size: int,
    groups_per_step: int,
    learning_rate: float | None,
    max_tokens: int | None,
    temperature: float,
    seed: int,
    completion_window: str,
    run_name: str,
    eval_problems: int | None,
    eval_samples: int | None,
    budget_sampled_tokens: int,
) -> None:
    """Every parameter of notebook 04, in the order its parameters cell lists them."""
    check_backend(backend)
    check_whole_number("steps", steps, 1, MAX_STEPS, none_ok=True)
    # GRPO compares samples of the same prompt: one sample has nothing to compare with.
    check_group_size(group_size, 2)
    train = TRAIN_PROBLEMS[backend]
    check_whole_number(
        "groups_per_step", groups_per_step, 1, train, why=_holds(backend, train, "training")
    )
    check_batch(("group_size", "groups_per_step"), (group_size, groups_per_step))
    check_number(
        "learning_rate", learning_rate, 0.0, MAX_LEARNING_RATE, above_low=True, none_ok=True
    )
    check_max_tokens(max_tokens, backend)
    check_temperature(temperature)
    check_whole_number("seed", seed, 0, MAX_SEED)
    check_completion_window(completion_window)
    check_run_name(run_name)
    check_evaluation(backend, None, eval_problems, eval_samples)
    check_budget_param(budget_sampled_tokens)


def check_evaluation(
    backend: str, notebook: str | None, eval_problems: int | None, eval_samples: int | None
) -> None:
    """A held-out evaluation's size: None takes `notebook`'s default on `backend`."""
    held_out = HELD_OUT_PROBLEMS[backend]
    check_whole_number(
        "eval_problems",
        eval_problems,
        1,
        held_out,
        why=_holds(backend, held_out, "held-out"),
        none_ok=True,
    )
    check_whole_number("eval_samples", eval_samples, 1, MAX_GROUP_SIZE, none_ok=True)
    sizes = with_defaults(backend, notebook, eval_problems=eval_problems, eval_samples=eval_samples)
    check_batch(("eval_problems", "eval_samples"), tuple(sizes.values()))


def check_budget_param(value: object) -> None:
    check_whole_number("budget_sampled_tokens", value, 0, MAX_BUDGET_SAMPLED_TOKENS)


def check_sandbox_params(
    *,
    backend: str,
    group_size: int,
    simulated_boot_seconds: float,
    max_tokens: int,
    temperature: float,
    budget_sampled_tokens: int,
) -> None:
    """Every parameter of notebook 07; `max_tokens` and `temperature` only reach the cloud."""
    check_backend(backend)
    check_group_size(group_size, 1, MAX_SANDBOXED_GROUP_SIZE)
    check_number("simulated_boot_seconds", simulated_boot_seconds, 0.0, MAX_BOOT_SECONDS)
    check_max_tokens(max_tokens, "cloud", none_ok=False)
    check_temperature(temperature)
    check_budget_param(budget_sampled_tokens)


def check_one_step_params(
    *,
    backend: str,
    seed: int,
    groups: int,
    group_size: int,
    learning_rate: float | None,
    max_tokens: int | None,
    temperature: float,
    budget_sampled_tokens: int,
) -> None:
    """Every parameter of the one-step notebook, in the order its parameters cell lists them."""
    check_backend(backend)
    check_whole_number("seed", seed, 0, MAX_SEED)
    train = TRAIN_PROBLEMS[backend]
    check_whole_number("groups", groups, 1, train, why=_holds(backend, train, "training"))
    check_group_size(group_size, 2)
    check_batch(("groups", "group_size"), (groups, group_size))
    check_number(
        "learning_rate", learning_rate, 0.0, MAX_LEARNING_RATE, above_low=True, none_ok=True
    )
    check_max_tokens(max_tokens, backend)
    check_temperature(temperature)
    check_budget_param(budget_sampled_tokens)


# Simulated latencies of notebook 06: longer ones would make a run take many minutes.
MAX_SIMULATED_LATENCY_S = 60.0
MIN_PIPELINE_STEPS = 3  # the first step fills the pipeline; two more show its pace


def check_faster_loops_params(
    *,
    backend: str,
    steps: int | None,
    group_size: int,
    groups_per_step: int,
    max_staleness: int,
    learning_rate: float | None,
    max_tokens: int | None,
    temperature: float,
    seed: int,
    balanced_latency_s: float,
    flex_latency_s: float,
    flex_steps: int | None,
    train_latency_s: float,
    eval_problems: int | None,
    eval_samples: int | None,
    run_name: str,
    budget_sampled_tokens: int,
) -> None:
    """Every parameter of notebook 06, in the order its parameters cell lists them (None:
    the backend's default, which the checks that relate two parameters use)."""
    check_backend(backend)
    check_whole_number("steps", steps, MIN_PIPELINE_STEPS, MAX_STEPS, none_ok=True)
    steps = with_defaults(backend, "06_faster_loops", steps=steps)["steps"]
    check_group_size(group_size, 2)
    train = TRAIN_PROBLEMS[backend]
    check_whole_number(
        "groups_per_step", groups_per_step, 1, train, why=_holds(backend, train, "training")
    )
    check_batch(("group_size", "groups_per_step"), (group_size, groups_per_step))
    # k = 1 is the second run already; the third shows what more batches in flight do.
    check_whole_number("max_staleness", max_staleness, 2, steps - 1, why="at most steps - 1")
    check_number(
        "learning_rate", learning_rate, 0.0, MAX_LEARNING_RATE, above_low=True, none_ok=True
    )
    check_max_tokens(max_tokens, backend)
    check_temperature(temperature)
    check_whole_number("seed", seed, 0, MAX_SEED)
    for name, value in (
        ("balanced_latency_s", balanced_latency_s),
        ("flex_latency_s", flex_latency_s),
        ("train_latency_s", train_latency_s),
    ):
        check_number(name, value, 0.0, MAX_SIMULATED_LATENCY_S)
    check_whole_number("flex_steps", flex_steps, MIN_PIPELINE_STEPS, MAX_STEPS, none_ok=True)
    check_evaluation(backend, "06_faster_loops", eval_problems, eval_samples)
    check_run_name(run_name)
    check_budget_param(budget_sampled_tokens)


# The comparison notebook's limits: the held-out scores notebook 04 stores, run-name
# patterns that can only match folder names under runs/, and a readable smoothing window.
HELD_OUT_METRICS = ("reward", "correct", "format", "correct_given_format")
RUN_PATTERN = re.compile(r"[A-Za-z0-9_.*?\[\]-]{1,64}")
MAX_PATTERNS = 64
MAX_SMOOTHING = 100


def check_comparison_params(*, backend: str, runs: str, metric: str, smoothing: int) -> None:
    """Every parameter of the comparison notebook, in the order its parameters cell lists them."""
    check_backend_name(backend)
    patterns = runs.split() if isinstance(runs, str) else []
    if not 1 <= len(patterns) <= MAX_PATTERNS or not all(map(RUN_PATTERN.fullmatch, patterns)):
        raise CourseConfigError(
            f"runs must be 1 to {MAX_PATTERNS} run names or glob patterns separated by spaces, "
            "each made of letters, digits, '.', '_', '-', '*', '?', '[' and ']' (they match "
            f"folder names under runs/), not {runs!r}."
        )
    if metric not in HELD_OUT_METRICS:
        raise CourseConfigError(
            f"metric must be one of {', '.join(map(repr, HELD_OUT_METRICS))}, not {metric!r}."
        )
    check_whole_number("smoothing", smoothing, 1, MAX_SMOOTHING)


# Notebook 08's own limits. Sail's rule for LoRA names; the tables stay readable.
LORA_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}[a-z0-9]")
MAX_PARITY_PROBLEMS = 64
MAX_TABLE_PROBLEMS = HELD_OUT_PROBLEMS["cloud"]


def check_shipping_params(
    *,
    backend: str,
    run_name: str,
    short_run_steps: int | None,
    lora_name: str,
    parity_problems: int,
    table_problems: int,
    max_tokens: int | None,
    seed: int,
    keep_on_sail: bool,
    budget_sampled_tokens: int,
) -> None:
    """Every parameter of notebook 08, in the order its parameters cell lists them."""
    check_backend(backend)
    check_run_name(run_name)
    check_whole_number("short_run_steps", short_run_steps, 1, MAX_STEPS, none_ok=True)
    if not isinstance(lora_name, str) or not LORA_NAME.fullmatch(lora_name):
        raise CourseConfigError(
            "lora_name must be 2-64 characters of a-z, 0-9 and '-', starting and ending with "
            f"a letter or digit (Sail's rule for LoRA names), not {lora_name!r}."
        )
    check_whole_number("parity_problems", parity_problems, 1, MAX_PARITY_PROBLEMS)
    # At most the cloud's 200 held-out problems, on either backend: the table stays readable.
    check_whole_number("table_problems", table_problems, 1, MAX_TABLE_PROBLEMS)
    check_max_tokens(max_tokens, backend)
    check_whole_number("seed", seed, 0, MAX_SEED)
    if not isinstance(keep_on_sail, bool):
        raise CourseConfigError(f"keep_on_sail must be True or False, not {keep_on_sail!r}.")
    check_budget_param(budget_sampled_tokens)
