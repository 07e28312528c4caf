"""`make rehearse-cloud`'s runner, on one notebook: it runs with `backend="cloud"` against a
stack of its own, the keys reach the kernel from the environment only, and nothing is left
running (the session's end fails the run if the rehearsal's stack outlives it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat

from local_stack.config import SAIL_API_KEY, TINKER_API_KEY

ROOT = Path(__file__).resolve().parents[2]


def test_the_rehearsal_runs_a_notebook_on_the_cloud_path(tmp_path: Path) -> None:
    rehearsal = subprocess.run(
        [sys.executable, "scripts/rehearse_cloud.py", "--notebooks", "01", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert rehearsal.returncode == 0, rehearsal.stdout[-3000:] + rehearsal.stderr[-3000:]
    [folder] = tmp_path.glob("rehearse-cloud-*")
    assert [p.name for p in folder.glob("*.ipynb")] == ["01_scoring.ipynb"]
    assert "01_scoring.ipynb" in rehearsal.stdout and rehearsal.stdout.rstrip().endswith("ok")

    executed = nbformat.read(folder / "01_scoring.ipynb", as_version=4)
    assert not [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    [injected] = [c for c in executed.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert 'backend = "cloud"' in injected.source and "KEY" not in injected.source
    shown = "".join(
        str(output.get("data", {}).get("text/plain", ""))
        for cell in executed.cells
        for output in cell.get("outputs", [])
    )
    # orca-math's 2,000 training and 200 held-out rows (answered locally): the cloud's split.
    assert "Course(backend='cloud', model='moonshotai/Kimi-K2.6', train_rows=2000" in shown
    assert TINKER_API_KEY.startswith("tml-")
    written = [p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file()]
    for key in (TINKER_API_KEY, SAIL_API_KEY):
        assert not any(key in text for text in [*written, rehearsal.stdout, rehearsal.stderr])
