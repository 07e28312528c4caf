"""Every exercise's check, fed what learners write: each typical mistake meets its own hint
and never a pass; the stub as shipped says the reference runs; the notebook's own solution
passes. The learner's code is taken from the notebook (exercises/cells.py).

The checks of the loop's step (04) and of the sandboxed step (08) call the reference and,
to find a hint, the mistakes before the learner's, on the same cases in every test: real
training steps on the stack, and scripts that run into their 2 s and 4 s timeouts. There,
each of these answers is computed once in this module, as the notebook computes it, and
reused (`answered_once`): an answer is the same from call to call by design (the step's
check compares what reached the training client, not samples; each sandboxed script writes
its answer afresh). Without that, each mistake's test paid again for every mistake before
it. (Not 02's: its cases record the URLs they sign afresh for each check.)
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import nbformat
import pytest

import exercises
from exercises import Exercise, all_exercises, check
from exercises.cells import exercise_pairs, solution_code
from exercises.check import CHOSEN
from tests.notebook_source import NOTEBOOKS

check_module = importlib.import_module("exercises.check")  # `exercises.check` is the function
EXERCISES = all_exercises()
ANSWERED_ONCE = ("04_training_loop/run_step", "08_sandboxed_rollouts/run_and_grade")
MISTAKES = [
    pytest.param(exercise, index, id=f"{key}-{index}")
    for key, exercise in EXERCISES.items()
    for index in range(len(exercise.mistakes))
]


@pytest.fixture(scope="module", autouse=True)
def answered_once() -> Iterator[None]:
    """The check's calls of `ANSWERED_ONCE`'s references and mistakes, each answered once per
    (function, case): an answer is kept, an exception is not (a fresh call raises it again).
    Every other function, a learner's code included, is called each time."""
    kept = {
        function
        for key in ANSWERED_ONCE
        for function in (
            EXERCISES[key].reference,
            *(mistake.implementation for mistake in EXERCISES[key].mistakes),
        )
    }
    answers: dict[tuple[Any, str], Any] = {}

    async def call(function: Any, case: Any) -> Any:
        key = (function, case.label)
        if function in kept and key in answers:
            return answers[key]
        result = function(*case.args, **case.kwargs)
        answer = await result if inspect.isawaitable(result) else result
        if function in kept:
            answers[key] = answer
        return answer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(check_module, "_call", call)
        yield


def checked(exercise: Exercise, function: Any, request: pytest.FixtureRequest) -> None:
    """Run the check on `function`, with the context the exercise's tests use."""
    if exercise.needs_stack:
        request.getfixturevalue("local_stack")

    async def run() -> None:
        context = await exercise.test_context() if exercise.test_context else {}
        await check(exercise, function, **context)

    asyncio.run(run())


def learner_code(exercise: Exercise, solved: bool) -> Any:
    """The notebook's stub (or its solution) for `exercise`, defined as the notebook would,
    among the names its exercise module imports."""
    book = nbformat.read(NOTEBOOKS / f"{exercise.notebook}.ipynb", as_version=4)
    for _, stub, solution in exercise_pairs(book):
        code = solution_code(solution) if solved else stub.source
        if f"def {exercise.name}(" in code:
            namespace = dict(vars(defined_in(exercise)))
            source = "from __future__ import annotations\n" + code
            exec(compile(source, f"<{exercise.notebook}>", "exec"), namespace)
            return namespace[exercise.name]
    raise AssertionError(f"no stub defines {exercise.name} in {exercise.notebook}")


def defined_in(exercise: Exercise) -> ModuleType:
    """The module of exercises/ that declares `exercise`."""
    for info in pkgutil.iter_modules(exercises.__path__):
        module = importlib.import_module(f"exercises.{info.name}")
        if any(value is exercise for value in vars(module).values()):
            return module
    raise AssertionError(exercise.name)


@pytest.mark.parametrize(("exercise", "index"), MISTAKES)
def test_each_typical_mistake_gets_its_own_hint_and_no_pass(
    exercise: Exercise, index: int, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture
) -> None:
    mistake = exercise.mistakes[index]
    checked(exercise, mistake.implementation, request)
    printed = capsys.readouterr().out
    assert mistake.hint in printed, printed
    assert CHOSEN[exercise.name] == "reference"


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=EXERCISES.keys())
def test_the_stub_as_shipped_leaves_the_reference_running(
    exercise: Exercise, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture
) -> None:
    checked(exercise, learner_code(exercise, solved=False), request)
    assert "is not written yet" in capsys.readouterr().out
    assert CHOSEN[exercise.name] == "reference"


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=EXERCISES.keys())
def test_the_notebooks_solution_passes(
    exercise: Exercise, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture
) -> None:
    checked(exercise, learner_code(exercise, solved=True), request)
    printed = capsys.readouterr().out
    assert printed.startswith("✓"), printed
    assert CHOSEN[exercise.name] == "yours"
