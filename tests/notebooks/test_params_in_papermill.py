"""A notebook run with a parameter out of its range fails in its check cell, in one sentence,
and a run whose rollouts all fail ends non-zero in one sentence (the in-process checks of
every range are tests/course/test_params.py)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from tests.notebook_support import SMALL_PARAMETERS, error_outputs, finish, papermill
from tests.params_support import INF, NAN


# End to end: a few papermill runs (each starts a kernel), one or two per notebook.
@pytest.mark.parametrize(
    ("notebook", "name", "value", "expected"),
    [
        ("01_scoring.ipynb", "group_size", 1_000_000, "group_size must be a whole number from 1"),
        (
            "02_snapshot_and_serve.ipynb",
            "temperature",
            NAN,
            "temperature must be 0 (greedy) or a number from 0.01",
        ),
        ("04_training_loop.ipynb", "groups_per_step", 5000, "from 1 to 1074 (the local backend"),
        ("04_training_loop.ipynb", "learning_rate", INF, "greater than 0 and at most 1"),
        ("08_sandboxed_rollouts.ipynb", "group_size", 100, "group_size must be a whole number"),
    ],
)
def test_papermill_with_a_value_out_of_range_fails_in_the_check_cell(
    notebook: str, name: str, value: object, expected: str, run_env: dict, tmp_path: Path
) -> None:
    """The check cell fails, before any heavy import and before anything after it runs.
    (How soon, 3 to 4 s after papermill starts here, is `python -m bench.fail_fast`'s.)
    """
    out = tmp_path / "out.ipynb"
    code, log = finish(papermill(notebook, out, {name: value}, run_env), timeout=120)
    assert code != 0
    executed = nbformat.read(out, as_version=4)
    [(index, error)] = [
        (i, o)
        for i, c in enumerate(executed.cells)
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]
    assert error.ename == "CourseConfigError" and len(error.traceback) == 1
    assert error.evalue.startswith(name) and expected in error.evalue
    assert f"not {value!r}." in error.evalue
    assert "helpers.settings(" in executed.cells[index].source


def test_a_run_whose_rollouts_all_fail_ends_non_zero_in_one_sentence(
    run_env: dict, tmp_path: Path
) -> None:
    """Every Sail response fails: notebook 04 stops at its first step, not green, naming
    Sail's failure (the course's retry check once met the failed response's missing status
    code with a TypeError)."""
    run_env["COURSE_SAIL_FAULTS"] = "failed=1"
    parameters = {**SMALL_PARAMETERS["04_training_loop.ipynb"], "run_name": "all-fail"}
    code, log = finish(
        papermill("04_training_loop.ipynb", tmp_path / "out.ipynb", parameters, run_env)
    )
    assert code != 0
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    [error] = error_outputs(executed)
    assert error.ename == "AllRolloutsFailedError" and len(error.traceback) == 1
    rollouts = parameters["group_size"] * parameters["groups_per_step"]
    assert error.evalue.startswith(f"All {rollouts} rollouts failed") and error.evalue in log
    assert "TypeError" not in error.evalue, error.evalue
