"""The instructor's version: every notebook with each exercise's solution in its stub's
place (`make solutions`) runs top to bottom at its small sizes, and every check passes, so
the cells below each exercise ran the solved code. (The learner's version, every stub
unsolved, is what the other notebook tests and nbval run.)

The notebooks in `SMALL_PARAMETERS` also run here with its non-default choices, on a stack of
their own with fake cloud keys set, and no key may show up in anything the run wrote
(`assert_clean_local_run`): one run checks both, where two runs of each notebook did."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from exercises import all_exercises
from scripts.make_solutions import write_solutions
from tests.notebook_support import (
    SMALL_PARAMETERS,
    assert_clean_local_run,
    error_outputs,
    finish,
    papermill,
    small,
)
from tests.sweep_support import write_sweep_runs

# Each notebook with exercises, and the parameters of its solved run.
SOLVED_RUNS = {
    "01_scoring": SMALL_PARAMETERS["01_scoring.ipynb"],
    "02_snapshot_and_serve": SMALL_PARAMETERS["02_snapshot_and_serve.ipynb"],
    "03_one_grpo_step": small("03_one_grpo_step"),
    "04_training_loop": small("04_training_loop", run_name="solved"),
    "05_compare_runs": {},  # it reads the runs below, as `make sweep` leaves them
    "06_faster_loops": small("06_faster_loops", run_name="solved-06"),
    "07_sandboxed_rollouts": SMALL_PARAMETERS["07_sandboxed_rollouts.ipynb"],
    # 08 trains a short run of its own when `run_name` names none.
    "08_ship_the_adapter": small("08_ship_the_adapter", run_name="solved-ship"),
}
# The notebooks that read earlier runs, and how their solved run gets some.
EARLIER_RUNS = {"05_compare_runs": lambda runs: write_sweep_runs(runs, [])}


def test_every_notebook_with_exercises_has_a_solved_run() -> None:
    assert {exercise.notebook for exercise in all_exercises().values()} <= set(SOLVED_RUNS)


@pytest.mark.parametrize("notebook", sorted(SOLVED_RUNS))
def test_the_solved_notebook_runs_and_every_check_passes(
    notebook: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    on_own_stack = f"{notebook}.ipynb" in SMALL_PARAMETERS
    env = request.getfixturevalue("run_env" if on_own_stack else "shared_stack_env")
    [solved] = [p for p in write_solutions(tmp_path / "solutions") if p.stem == notebook]
    if notebook in EARLIER_RUNS:
        EARLIER_RUNS[notebook](Path(env["COURSE_RUNS_DIR"]))
    out = tmp_path / f"{notebook}.ipynb"
    code, log = finish(papermill(str(solved), out, SOLVED_RUNS[notebook], env))
    assert code == 0, log[-3000:]
    executed = nbformat.read(out, as_version=4)
    assert not error_outputs(executed)
    if on_own_stack:
        assert_clean_local_run(out, env, tmp_path, log)
    shown = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    for exercise in all_exercises().values():
        if exercise.notebook == notebook:
            assert f"✓ `{exercise.name}` passes" in shown, shown[-3000:]
    assert "is not written yet" not in shown
