"""Every notebook is stored clean, can be parameterised, and runs on the plain python3 kernel."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[2] / "notebooks").glob("*.ipynb"))


def test_course_has_notebooks() -> None:
    assert NOTEBOOKS and NOTEBOOKS[0].name == "01_scoring.ipynb"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_without_outputs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    dirty = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not dirty, f"{path.name}: cells {dirty} have outputs or execution counts"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_has_one_parameters_cell(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{path.name}: {len(tagged)} cells tagged 'parameters'"
    assert "backend" in tagged[0].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_kernelspec_is_python3(path: Path) -> None:
    assert nbformat.read(path, as_version=4).metadata["kernelspec"]["name"] == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opens_with_goals_and_ends_with_try_this(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    assert nb.cells[0].cell_type == "markdown" and "you will be able to" in nb.cells[0].source
    assert "## What you learned" in nb.cells[-1].source and "## Try this" in nb.cells[-1].source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_never_starts_its_own_event_loop(path: Path) -> None:
    """Jupyter already runs a loop: notebooks use top-level await, never asyncio.run."""
    source = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells)
    assert "asyncio.run(" not in source and "nest_asyncio" not in source
