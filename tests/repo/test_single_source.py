"""The modules that notebooks teach are what `make helpers` builds from their `# @save` cells.

Editing a `# @save` cell without re-exporting, or editing a generated module by hand, fails
here; so does an export that is not stable (a second run must change nothing).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from scripts.export_helpers import MODULES, ROOT, SAVE_MARK, export, saved_cells

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out_dir = tmp_path_factory.mktemp("exported")
    export(out_dir=out_dir)
    return out_dir


@pytest.mark.parametrize("taught", MODULES, ids=lambda t: t.module)
def test_committed_module_is_the_export(exported: Path, taught) -> None:
    committed = (ROOT / "helpers" / taught.module).read_bytes()
    assert (exported / taught.module).read_bytes() == committed, (
        f"helpers/{taught.module} is not what notebooks/{taught.notebook} exports: "
        "edit the notebook's `# @save` cells, then run `make helpers`"
    )


@pytest.mark.parametrize("taught", MODULES, ids=lambda t: t.module)
def test_module_header_names_its_notebook(taught) -> None:
    header = (ROOT / "helpers" / taught.module).read_text().splitlines()[:2]
    assert f"notebooks/{taught.notebook}" in header[0] and "make helpers" in "".join(header)


def test_exporting_twice_changes_nothing(exported: Path) -> None:
    before = {p.name: p.read_bytes() for p in exported.iterdir()}
    assert export(out_dir=exported) == []
    assert {p.name: p.read_bytes() for p in exported.iterdir()} == before
    formatted = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--config", "pyproject.toml"]
        + [str(p) for p in exported.iterdir()],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert formatted.returncode == 0, formatted.stdout


def test_a_changed_saved_cell_changes_the_module(tmp_path: Path) -> None:
    """The check above can fail: an edited `# @save` cell shows up in the export."""
    notebooks = tmp_path / "notebooks"
    shutil.copytree(ROOT / "notebooks", notebooks)
    path = notebooks / "01_scoring.ipynb"
    nb = nbformat.read(path, as_version=4)
    suffix_cell = next(c for c in nb.cells if "QUESTION_SUFFIX =" in c.source)
    suffix_cell.source = suffix_cell.source.replace("final answer", "final result")
    nbformat.write(nb, path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    export(notebooks_dir=notebooks, out_dir=out_dir)
    scoring = (out_dir / "scoring.py").read_text()
    assert "final result" in scoring
    assert scoring != (ROOT / "helpers" / "scoring.py").read_text()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_saved_cell_is_exported(path: Path) -> None:
    """A notebook with `# @save` cells must have a module in MODULES, or they go nowhere."""
    if saved_cells(path):
        assert path.name in {name for t in MODULES for name in t.notebooks}, (
            f"{path.name} has `{SAVE_MARK}` cells but scripts/export_helpers.py exports nothing"
            " from it"
        )
