"""Each parameter is declared once (`helpers/notebook_parameters.py`); `make docs` writes every
other place it appears. These fail when a declaration changed and `make docs` was not run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from helpers.notebook_parameters import NOTEBOOK_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
# `scripts/make_docs.py --check`, then `scripts/make_docs.py`, then `--check` again, each run
# as the command line runs it, but in one process: each run as a process of its own imported
# the same libraries again, for about 7 s of CPU. Prints each run's exit status after its output.
THREE_RUNS = """
import runpy, sys
for arguments in (["--check"], [], ["--check"]):
    sys.argv = ["scripts/make_docs.py", *arguments]
    try:
        runpy.run_path("scripts/make_docs.py", run_name="__main__")
        status = 0
    except SystemExit as stop:
        status = 0 if stop.code in (None, 0) else 1
    print("exit status", status, flush=True)
"""


def test_every_generated_place_matches_the_declarations():
    """What `make_docs.py --check` checks, in this process, which has imported what it needs
    (as its own process it costs about 8 s of CPU; the next test runs the command itself)."""
    from scripts.make_docs import stale_files

    assert stale_files() == [], "stale: run make docs"


def test_a_changed_default_reaches_every_place_it_appears(tmp_path):
    """Change notebook 04's `steps` default in a copy of the repo's declarations, run the
    generator there, and find the new value in the cell, docs/cloud.md and the guide."""
    copy = tmp_path / "repo"
    for part in ("budget", "helpers", "kimi", "notebook_ui", "scripts", "notebooks", "docs"):
        shutil.copytree(ROOT / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    declarations = copy / "helpers" / "notebook_parameters.py"
    text = declarations.read_text()
    old = 'Parameter(None, STEPS, "optimizer steps", local=90, cloud=7)'
    assert old in text
    declarations.write_text(text.replace(old, old.replace("local=90", "local=91")))
    env = {"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}
    runs = subprocess.run(
        [sys.executable, "-c", THREE_RUNS], cwd=copy, env=env, capture_output=True, text=True
    )
    assert runs.returncode == 0, runs.stderr[-3000:]
    statuses = [line for line in runs.stdout.splitlines() if line.startswith("exit status")]
    assert statuses == ["exit status 1", "exit status 0", "exit status 0"]  # stale; written; fresh
    cell = _parameters_cell(copy / "notebooks" / "04_training_loop.ipynb")
    assert "None: 91 locally, 7 in the cloud" in cell
    assert "| 04 | `steps` | `91` | `7` |" in (copy / "docs" / "cloud.md").read_text()
    assert "None: 91 locally" in (copy / "docs" / "instructor.md").read_text()


def _parameters_cell(path: Path) -> str:
    book = nbformat.read(path, as_version=4)
    [cell] = [c for c in book.cells if "parameters" in c.metadata.get("tags", [])]
    return cell.source


def test_each_parameters_cell_sets_what_is_declared():
    for notebook, parameters in NOTEBOOK_PARAMETERS.items():
        namespace: dict = {}
        exec(_parameters_cell(ROOT / "notebooks" / f"{notebook}.ipynb"), namespace)
        values = {k: v for k, v in namespace.items() if not k.startswith("__")}
        assert values == {name: p.value for name, p in parameters.items()}, notebook
