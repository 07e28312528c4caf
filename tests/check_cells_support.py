"""A notebook's cells before `helpers.connect(` (its parameters and check cells), run in this
process as papermill would run them: no kernel to start, and nothing sent, since those cells
only check their parameters and print what a run would cost."""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass
from pathlib import Path

import nbformat

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@dataclass
class CheckRun:
    printed: str  # everything the cells printed
    error: Exception | None  # what a cell raised, if one did (the cells after it did not run)
    failed_source: str  # the source of the cell that raised, or ""


def run_check_cells(notebook: str, **parameters: object) -> CheckRun:
    """Run `notebook`'s code cells before its `helpers.connect(` cell, with `parameters` set
    right after its parameters cell (where papermill injects them)."""
    cells = nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
    [connect] = [i for i, c in enumerate(cells) if "helpers.connect(" in c.source]
    namespace: dict = {"__name__": "__main__"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for cell in cells[:connect]:
            if cell.cell_type != "code":
                continue
            try:
                exec(compile(cell.source, notebook, "exec"), namespace)  # noqa: S102
            except Exception as error:  # noqa: BLE001 (the caller checks what it is)
                return CheckRun(printed.getvalue(), error, cell.source)
            if "parameters" in cell.metadata.get("tags", []):
                for name, value in parameters.items():
                    namespace[name] = value
    return CheckRun(printed.getvalue(), None, "")
