"""What an exercise is, and the check a notebook calls right below the learner's function.

An exercise is one function the learner writes in a notebook (the stub cell), the course's
own version of it (`reference`), a few targeted cases, and the typical wrong answers, each a
small function that makes that mistake on purpose, with the hint it deserves. The check runs
the learner's function on every case and prints one of four outcomes:

- a pass: the cells below use the learner's function;
- not written yet (the stub still raises NotImplementedError): they use the reference;
- a wrong answer: the first case it got wrong, expected against got, and the hint of the
  typical mistake that gives the same wrong answer on that case (or a general hint); they
  use the reference;
- an exception: its type and message, and the case that raised it; they use the reference.

So Run All always completes, and the line printed says whose code ran. The mistakes double
as the check's own test (tests/course/test_exercise_checks.py): each must meet its own hint and
never a pass.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

REFERENCE_MARK = "__course_reference__"
# Whose code each exercise's check last chose, by exercise name: "yours" or "reference".
CHOSEN: dict[str, str] = {}


def same(got: Any, expected: Any, tolerance: float = 1e-5) -> bool:
    """Equal, with floats and tensors compared within `tolerance` (relative and absolute)."""
    if isinstance(expected, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(got, torch.Tensor) and isinstance(expected, torch.Tensor)):
            return False
        return got.shape == expected.shape and torch.allclose(
            got.double(), expected.double(), rtol=tolerance, atol=tolerance, equal_nan=True
        )
    if isinstance(expected, float) or isinstance(got, float):
        if not isinstance(got, int | float) or isinstance(got, bool):
            return False
        return math.isclose(got, expected, rel_tol=tolerance, abs_tol=tolerance) or (
            math.isnan(got) and math.isnan(expected)
        )
    if isinstance(expected, Mapping):
        return (
            isinstance(got, Mapping)
            and got.keys() == expected.keys()
            and all(same(got[k], expected[k], tolerance) for k in expected)
        )
    if isinstance(expected, list | tuple):
        return (
            isinstance(got, list | tuple)
            and len(got) == len(expected)
            and all(same(g, e, tolerance) for g, e in zip(got, expected, strict=True))
        )
    return bool(got == expected)


@dataclass(frozen=True)
class Case:
    """One call of the learner's function: `label` names it in a hint."""

    label: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Mistake:
    """A typical wrong answer: `name` for the instructor guide, `hint` for the learner, and
    `implementation`, a version of the function that makes exactly this mistake."""

    name: str
    hint: str
    implementation: Callable[..., Any]


@dataclass(frozen=True)
class Exercise:
    """One function a learner writes. `cases(**context)` gives the calls to check (the
    context is what the notebook passes, such as a renderer); `same(got, expected)` decides
    whether an answer is right."""

    name: str  # the function's name in the notebook
    notebook: str  # e.g. "03_one_grpo_step"
    minutes: int
    reference: Callable[..., Any]
    cases: Callable[..., Sequence[Case]]
    mistakes: Sequence[Mistake]
    same: Callable[[Any, Any], bool] = same
    # What the tests pass as the context (the notebook passes its own): an async factory,
    # and whether it needs the tests' local stack running.
    test_context: Callable[[], Awaitable[dict[str, Any]]] | None = None
    needs_stack: bool = False
    # How a hint shows an answer whose repr says little (a tinker.Datum hides its numbers).
    shown: Callable[[Any], str] | None = None


def reference(function: Callable[..., Any]) -> Callable[..., Any]:
    """Mark `function` as the course's own, so that a check given it says so."""
    setattr(function, REFERENCE_MARK, True)
    return function


async def check(exercise: Exercise, function: Callable[..., Any], **context: Any) -> Any:
    """Run `function` on the exercise's cases; print the outcome in a line or three; return
    the function the cells below should use (the learner's if it passed, else the course's)."""
    name = exercise.name
    if getattr(function, REFERENCE_MARK, False):
        print(
            f"`{name}` is the course's reference right now (an earlier check chose it): "
            f"edit your cell above, run it, then run this check again."
        )
        return _choose(exercise, "reference")
    cases = exercise.cases(**context)
    for case in cases:
        try:
            got = await _call(function, case)
        except NotImplementedError:
            print(
                f"· `{name}` is not written yet (about {exercise.minutes} minutes): the cells "
                f"below use the course's reference."
            )
            return _choose(exercise, "reference")
        except Exception as error:  # the learner's code may raise anything
            print(
                f"✗ `{name}` raised {type(error).__name__}: {error}\n"
                f"  on the case {case.label!r}. The cells below use the course's reference "
                f"until this check passes."
            )
            return _choose(exercise, "reference")
        expected = await _call(exercise.reference, case)
        if not exercise.same(got, expected):
            print(
                f"✗ `{name}` is wrong on the case {case.label!r}:\n"
                f"  expected {_short(expected, exercise.shown)}\n"
                f"  got      {_short(got, exercise.shown)}\n"
                f"  Hint: {await _hint(exercise, case, got)}\n"
                f"  The cells below use the course's reference until this check passes."
            )
            return _choose(exercise, "reference")
    print(f"✓ `{name}` passes all {len(cases)} cases: the cells below use yours.")
    return _choose(exercise, "yours", function)


async def _hint(exercise: Exercise, case: Case, got: Any) -> str:
    """The hint of the first typical mistake that answers `case` exactly as the learner did."""
    for mistake in exercise.mistakes:
        try:
            if exercise.same(got, await _call(mistake.implementation, case)):
                return mistake.hint
        except Exception:  # a mistake that cannot answer this case is not this one
            continue
    return (
        "none of the usual mistakes gives this answer: compare your code with the docstring "
        "line by line, or open the solution below."
    )


async def _call(function: Callable[..., Any], case: Case) -> Any:
    result = function(*case.args, **case.kwargs)
    return await result if inspect.isawaitable(result) else result


def _choose(exercise: Exercise, whose: str, function: Callable[..., Any] | None = None) -> Any:
    CHOSEN[exercise.name] = whose
    if function is not None:
        return function
    return reference(exercise.reference)


def _short(value: Any, shown: Callable[[Any], str] | None = None, width: int = 160) -> str:
    if shown is not None:
        try:
            text = shown(value)
        except Exception:  # a learner's answer of another type: show it as it is
            text = repr(value)
    else:
        text = repr(value.tolist() if isinstance(value, torch.Tensor) else value)
    return text if len(text) <= width else text[: width - 1] + "…"
