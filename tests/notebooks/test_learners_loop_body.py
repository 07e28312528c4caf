"""A learner's own loop body, correct but not the course's, is the one notebook 04 trains with:
one that logs an extra field in every step's record passes its check, and that field is in
every line of the run's metrics.jsonl.

The run is also notebook 04's solved run: `make solutions`' copy (every other exercise solved
as the notebook's solutions are, which tests/course/test_exercise_checks.py passes through
their checks), at small sizes, on a stack of its own with fake keys set, so every check must
pass and no key may show up in anything it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from exercises.cells import EXERCISE_TAG, tagged
from tests.notebook_support import (
    SMALL_PARAMETERS,
    assert_clean_local_run,
    assert_every_check_passes,
    finish,
    papermill,
    solved_copy,
)

NOTEBOOK = "04_training_loop"
EXTRA = "steps_squared"  # what the course's record does not have


def notebook_with_learners_loop_body(folder: Path) -> Path:
    """The solved notebook 04 whose `run_step` logs one more field."""
    book = nbformat.read(solved_copy(NOTEBOOK, folder / "solutions"), as_version=4)
    [cell] = [c for c in book.cells if tagged(c, EXERCISE_TAG) and "def run_step(" in c.source]
    assert '"step": step,' in cell.source
    cell.source = cell.source.replace('"step": step,', f'"step": step, "{EXTRA}": step**2,')
    path = folder / "04_learner.ipynb"
    nbformat.write(book, path)
    return path


def test_a_learners_passing_loop_body_is_the_one_that_trains(run_env: dict, tmp_path: Path) -> None:
    parameters = {**SMALL_PARAMETERS[f"{NOTEBOOK}.ipynb"], "run_name": "learner"}
    out = tmp_path / "out.ipynb"
    notebook = notebook_with_learners_loop_body(tmp_path)
    code, log = finish(papermill(str(notebook), out, parameters, run_env), 1200)
    assert code == 0, log[-3000:]
    assert_every_check_passes(nbformat.read(out, as_version=4), NOTEBOOK)  # run_step's too
    assert_clean_local_run(out, run_env, tmp_path, log)
    metrics = Path(run_env["COURSE_RUNS_DIR"]) / "learner" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line]
    assert len(records) == parameters["steps"]
    assert [r[EXTRA] for r in records] == [r["step"] ** 2 for r in records]
