"""The instructor's version: every notebook with each exercise's solution in its stub's
place (`make solutions`) runs top to bottom at its small sizes, and every check passes, so
the cells below each exercise ran the solved code. (The learner's version, every stub
unsolved, is what the other notebook tests and nbval run.)

The notebooks in `SMALL_PARAMETERS` also run here with its non-default choices, on a stack of
their own with fake cloud keys set, and no key may show up in anything the run wrote
(`assert_clean_local_run`): one run checks both, where two runs of each notebook did.
Likewise the notebooks in `SOLVED_ELSEWHERE`: their solved run is the one their scenario
tests read (a notebook run takes a minute or more; one run serves them all)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from exercises import all_exercises
from tests.notebook_support import (
    SMALL_PARAMETERS,
    assert_clean_local_run,
    assert_every_check_passes,
    finish,
    papermill,
    solved_copy,
)
from tests.sweep_support import write_sweep_runs

# Each notebook with exercises, and the parameters of its solved run.
SOLVED_RUNS = {
    "01_scoring": SMALL_PARAMETERS["01_scoring.ipynb"],
    "02_snapshot_and_serve": SMALL_PARAMETERS["02_snapshot_and_serve.ipynb"],
    "10_reward_hacking": SMALL_PARAMETERS["10_reward_hacking.ipynb"],
    "06_compare_runs": {},  # it reads the runs below, as `make sweep` leaves them
}
# The notebooks whose solved run is in the file that tests their scenarios, on the same run.
SOLVED_ELSEWHERE = {
    "03_one_grpo_step": "test_learner_code_runs.py",
    "04_training_loop": "test_learners_loop_body.py",
    "05_did_it_learn": "test_results.py",  # it scores a run that file trains
    "07_faster_loops": "test_pipelining.py",
    "08_sandboxed_rollouts": "test_notebook_08_platforms.py",
    "09_ship_the_adapter": "test_ship_adapter_runs.py",
}
# The notebooks that read earlier runs, and how their solved run gets some.
EARLIER_RUNS = {"06_compare_runs": lambda runs: write_sweep_runs(runs, [])}


def test_every_notebook_with_exercises_has_a_solved_run() -> None:
    solved = set(SOLVED_RUNS) | set(SOLVED_ELSEWHERE)
    assert {exercise.notebook for exercise in all_exercises().values()} <= solved
    here = Path(__file__).parent
    for notebook, test_file in SOLVED_ELSEWHERE.items():
        assert "assert_every_check_passes" in (here / test_file).read_text(), notebook


@pytest.mark.parametrize("notebook", sorted(SOLVED_RUNS))
def test_the_solved_notebook_runs_and_every_check_passes(
    notebook: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    on_own_stack = f"{notebook}.ipynb" in SMALL_PARAMETERS
    env = request.getfixturevalue("run_env" if on_own_stack else "shared_stack_env")
    solved = solved_copy(notebook, tmp_path / "solutions")
    if notebook in EARLIER_RUNS:
        EARLIER_RUNS[notebook](Path(env["COURSE_RUNS_DIR"]))
    out = tmp_path / f"{notebook}.ipynb"
    code, log = finish(papermill(str(solved), out, SOLVED_RUNS[notebook], env))
    assert code == 0, log[-3000:]
    assert_every_check_passes(nbformat.read(out, as_version=4), notebook)
    if on_own_stack:
        assert_clean_local_run(out, env, tmp_path, log)
