"""Every exercise has the shape the course promises (exercises/cells.py): a stub that raises
NotImplementedError, its check right below, its solution collapsed below that, at least
three typical mistakes with distinct hints; and the course has enough of them."""

from __future__ import annotations

import nbformat
import pytest

from exercises import Exercise, all_exercises
from exercises.cells import SOLUTION_TAG, exercise_pairs, tagged
from tests.notebook_source import NOTEBOOK_NAMES, NOTEBOOKS

EXERCISES = all_exercises()


def test_every_notebook_has_an_exercise_and_the_course_at_least_twelve() -> None:
    having = {exercise.notebook for exercise in EXERCISES.values()}
    assert sorted(set(NOTEBOOK_NAMES) - having) == []
    assert len(EXERCISES) >= 12


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=EXERCISES.keys())
def test_each_exercise_has_three_mistakes_with_their_own_hints(exercise: Exercise) -> None:
    assert len(exercise.mistakes) >= 3
    assert len({m.hint for m in exercise.mistakes}) == len(exercise.mistakes)
    assert 1 <= exercise.minutes <= 30


@pytest.mark.parametrize("exercise", EXERCISES.values(), ids=EXERCISES.keys())
def test_stub_check_and_solution_sit_together(exercise: Exercise) -> None:
    book = nbformat.read(NOTEBOOKS / f"{exercise.notebook}.ipynb", as_version=4)
    [(index, stub, solution)] = [
        pair for pair in exercise_pairs(book) if f"def {exercise.name}(" in pair[1].source
    ]
    assert "raise NotImplementedError" in stub.source
    assert "# YOUR CODE HERE" in stub.source
    check_cell = book.cells[index + 1]
    assert check_cell.cell_type == "code"
    assert f"{exercise.name} = await check(" in check_cell.source
    assert book.cells[index + 2] is solution and tagged(solution, SOLUTION_TAG)
    assert tagged(solution, "optional")  # read only by a learner who is stuck: not core path
    assert solution.cell_type == "markdown" and solution.source.startswith("<details>")
    assert "### BEGIN SOLUTION" in solution.source and "### END SOLUTION" in solution.source
