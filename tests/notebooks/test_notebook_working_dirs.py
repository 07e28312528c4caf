"""Every notebook runs under papermill from the repository root as well as from notebooks/.

JupyterLab and nbval start a notebook's kernel in notebooks/; the README's papermill example
starts it wherever the shell is, usually the repository root. A path a notebook spells
relative to its working directory (notebook 07's task folder once was `../tasks/...`)
resolves in one of the two and fails in the other, so each notebook runs from both, on the
local backend with small parameters (`scripts/rehearse_cloud.py`'s sizes), each run in its
own runs/ and stack folders.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from scripts.rehearse_cloud import SMALL

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = ROOT / "notebooks"
WORKING_DIRS = {"repository root": ROOT, "notebooks/": NOTEBOOKS}
RUN_NAME = "working-dir"
# The rehearsal's small sizes on the local backend; notebook 07's held-out set small too.
PARAMETERS = {**SMALL, "backend": "local", "run_name": RUN_NAME, "runs": RUN_NAME, "eval_tasks": 4}
# Notebook 05 compares runs that notebook 04 made: one small run is made for it first.
NEEDS_A_RUN = {"05_compare_runs.ipynb": "04_training_loop.ipynb"}


def run_from(notebook: str, working_dir: Path, out: Path, env: dict[str, str]) -> str:
    """Run `notebook` under papermill started in `working_dir` (no `--cwd`: the kernel starts
    where papermill does); return papermill's log, failing on a non-zero exit."""
    declared = nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
    [parameters_cell] = [c for c in declared if "parameters" in c.metadata.get("tags", [])]
    args = [sys.executable, "-m", "papermill", str(NOTEBOOKS / notebook), str(out)]
    args += ["--kernel", "python3", "--no-progress-bar"]
    for name, value in PARAMETERS.items():
        if f"\n{name} = " in f"\n{parameters_cell.source}":
            args += ["-p", name, str(value)]
    done = subprocess.run(
        args, cwd=working_dir, env=env, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, f"{notebook} from {working_dir}:\n{done.stdout[-3000:]}"
    return done.stdout


@pytest.mark.parametrize("where", list(WORKING_DIRS))
@pytest.mark.parametrize("notebook", sorted(p.name for p in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb")))
def test_each_notebook_runs_from_the_repository_root_and_from_notebooks(
    notebook: str, where: str, run_env: dict, tmp_path: Path
) -> None:
    working_dir = WORKING_DIRS[where]
    if notebook in NEEDS_A_RUN:
        run_from(NEEDS_A_RUN[notebook], working_dir, tmp_path / "first.ipynb", run_env)
    out = tmp_path / notebook
    run_from(notebook, working_dir, out, run_env)
    executed = nbformat.read(out, as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    # Every code cell ran: none was cut short by a path that did not resolve.
    assert all(c.execution_count for c in executed.cells if c.cell_type == "code")
