"""A learner's own loop body, correct but not the course's, is the one notebook 04 trains with:
one that logs an extra field in every step's record passes its check, and that field is in
every line of the run's metrics.jsonl."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from exercises.cells import exercise_pairs, solution_code
from tests.notebook_support import NOTEBOOKS, SMALL_PARAMETERS, error_outputs, finish, papermill

EXTRA = "steps_squared"  # what the course's record does not have


def notebook_with_learners_loop_body(folder: Path) -> Path:
    """A copy of notebook 04 whose `run_step` stub holds the solution plus one logged field."""
    book = nbformat.read(NOTEBOOKS / "04_training_loop.ipynb", as_version=4)
    [(index, _, solution)] = [p for p in exercise_pairs(book) if "def run_step(" in p[1].source]
    code = solution_code(solution)
    assert '"step": step,' in code
    book.cells[index].source = code.replace('"step": step,', f'"step": step, "{EXTRA}": step**2,')
    path = folder / "04_learner.ipynb"
    nbformat.write(book, path)
    return path


def test_a_learners_passing_loop_body_is_the_one_that_trains(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    parameters = {**SMALL_PARAMETERS["04_training_loop.ipynb"], "run_name": "learner"}
    out = tmp_path / "out.ipynb"
    notebook = notebook_with_learners_loop_body(tmp_path)
    code, log = finish(papermill(str(notebook), out, parameters, shared_stack_env), 1200)
    assert code == 0, log[-3000:]
    executed = nbformat.read(out, as_version=4)
    assert not error_outputs(executed)
    shown = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "✓ `run_step` passes" in shown, shown[-3000:]
    metrics = Path(shared_stack_env["COURSE_RUNS_DIR"]) / "learner" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line]
    assert len(records) == parameters["steps"]
    assert [r[EXTRA] for r in records] == [r["step"] ** 2 for r in records]
