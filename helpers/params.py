"""Checks for notebook parameters, run before anything touches a server.

Each check raises `CourseConfigError` with one sentence that names the parameter and
what is allowed, so a bad papermill `-p` fails in seconds instead of mid-run.
"""

from __future__ import annotations

import os
import re

from helpers.errors import CourseConfigError

BACKENDS = ("local", "cloud")
COMPLETION_WINDOWS = ("balanced", "flex")
RETIRED_WINDOWS = ("priority", "15m")


def check_backend(backend: str) -> None:
    """Fail fast, before any remote call, if `backend` or its keys are unusable."""
    if backend not in BACKENDS:
        raise CourseConfigError(
            f"backend must be one of {', '.join(map(repr, BACKENDS))}, not {backend!r}."
        )
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


def check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CourseConfigError(f"{name} must be a whole number >= {minimum}, not {value!r}.")


def check_positive(name: str, value: object, none_ok: bool = False) -> None:
    if none_ok and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        default = " (or None for the backend's default)" if none_ok else ""
        raise CourseConfigError(f"{name} must be a number greater than 0{default}, not {value!r}.")


def check_completion_window(value: object) -> None:
    if value in RETIRED_WINDOWS:
        raise CourseConfigError(
            f"completion_window {value!r} is retired; use 'balanced' or 'flex'."
        )
    if value not in COMPLETION_WINDOWS:
        raise CourseConfigError(f"completion_window must be 'balanced' or 'flex', not {value!r}.")


def check_sampling(max_tokens: object, temperature: object) -> None:
    """`max_tokens=None` means the backend's default."""
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise CourseConfigError(
            f"max_tokens must be a whole number >= 1 (or None for the backend's default), "
            f"not {max_tokens!r}."
        )
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or temperature < 0:
        raise CourseConfigError(f"temperature must be a number >= 0, not {temperature!r}.")


def check_run_name(value: object) -> None:
    if not isinstance(value, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", value):
        raise CourseConfigError(
            "run_name must be 1-64 letters, digits, '.', '_' or '-' (it names a folder "
            f"under runs/), not {value!r}."
        )


def check_training_params(
    *,
    backend: str,
    steps: int,
    group_size: int,
    groups_per_step: int,
    learning_rate: float | None,
    max_tokens: int | None,
    temperature: float,
    seed: int,
    completion_window: str,
    run_name: str,
) -> None:
    """Every parameter of notebook 03, checked in the order the parameters cell lists them."""
    check_backend(backend)
    check_int("steps", steps, 1)
    # GRPO compares samples of the same prompt: one sample has nothing to compare with.
    check_int("group_size", group_size, 2)
    check_int("groups_per_step", groups_per_step, 1)
    check_positive("learning_rate", learning_rate, none_ok=True)
    check_sampling(max_tokens, temperature)
    check_int("seed", seed, 0)
    check_completion_window(completion_window)
    check_run_name(run_name)


# Notebook 09's ranges. Sail's rule for LoRA names; counts of held-out problems up to the
# smaller held-out set (the cloud's 200); max_tokens up to the model's context.
LORA_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}[a-z0-9]")
MAX_SHORT_RUN_STEPS = 10_000
MAX_PARITY_PROBLEMS = 64
MAX_TABLE_PROBLEMS = 200
MAX_SEED = 2**32 - 1
CONTEXT_TOKENS = {"local": 256, "cloud": 262_144}


def check_shipping_params(
    *,
    backend: str,
    run_name: str,
    short_run_steps: int,
    lora_name: str,
    parity_problems: int,
    table_problems: int,
    max_tokens: int | None,
    seed: int,
    keep_on_sail: bool,
) -> None:
    """Every parameter of notebook 09, in the order its parameters cell lists them."""
    check_backend(backend)
    check_run_name(run_name)
    check_in_range("short_run_steps", short_run_steps, 1, MAX_SHORT_RUN_STEPS)
    if not isinstance(lora_name, str) or not LORA_NAME.fullmatch(lora_name):
        raise CourseConfigError(
            "lora_name must be 2-64 characters of a-z, 0-9 and '-', starting and ending with "
            f"a letter or digit (Sail's rule for LoRA names), not {lora_name!r}."
        )
    check_in_range("parity_problems", parity_problems, 1, MAX_PARITY_PROBLEMS)
    held_out = "the cloud backend has 200 held-out problems"
    check_in_range("table_problems", table_problems, 1, MAX_TABLE_PROBLEMS, why=held_out)
    if max_tokens is not None:
        context = CONTEXT_TOKENS[backend]
        check_in_range("max_tokens", max_tokens, 1, context, why=f"the {backend} model's context")
    check_in_range("seed", seed, 0, MAX_SEED)
    if not isinstance(keep_on_sail, bool):
        raise CourseConfigError(f"keep_on_sail must be True or False, not {keep_on_sail!r}.")


def check_in_range(name: str, value: object, low: int, high: int, why: str = "") -> None:
    """`value` is an int (not a bool) from `low` to `high`."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        reason = f" ({why})" if why else ""
        raise CourseConfigError(
            f"{name} must be a whole number from {low} to {high}{reason}, not {value!r}."
        )
