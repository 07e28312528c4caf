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


def check_range(name: str, value: object, low: float, high: float) -> None:
    """A number from `low` to `high`, both included."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise CourseConfigError(f"{name} must be a number from {low} to {high}, not {value!r}.")


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
