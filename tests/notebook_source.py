"""The one reader of the course's notebooks and instructor guide as stored (sources, not
outputs), for tests that run a notebook's cells in process or read a number the text states.

Tests read text to find code and numbers, never to pin a sentence: wording is for review.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
GUIDE_PATH = ROOT / "docs" / "instructor.md"
NOTEBOOK_NAMES = sorted(path.stem for path in NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb"))


@cache
def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)


def cells(name: str) -> list[nbformat.NotebookNode]:
    """A notebook's cells, by its name with or without `.ipynb` (a fresh copy: edit freely)."""
    return nbformat.from_dict(_read(name.removesuffix(".ipynb"))).cells


def cell(name: str, cell_id: str) -> str:
    """The source of the cell with this id."""
    [source] = [c.source for c in cells(name) if c.get("id") == cell_id]
    return source


def is_optional(notebook_cell: nbformat.NotebookNode) -> bool:
    return "optional" in notebook_cell.metadata.get("tags", [])


def markdown(name: str, *, core: bool = False) -> str:
    """All markdown of a notebook, or only its core path's (cells not tagged `optional`)."""
    return "\n".join(
        c.source for c in cells(name) if c.cell_type == "markdown" and not (core and is_optional(c))
    )


def code_cells(name: str) -> list[nbformat.NotebookNode]:
    return [c for c in cells(name) if c.cell_type == "code"]


def guide() -> str:
    return GUIDE_PATH.read_text()


def guide_section(name: str) -> str:
    """The guide's text under `### <name>`, up to the next heading of any level."""
    match = re.search(rf"^### {name}\b.*?(?=^##)", guide(), flags=re.S | re.M)
    assert match, f"docs/instructor.md has no section '### {name}'"
    return match.group(0)


def flat(text: str) -> str:
    """`text` with every run of whitespace one space, so a number split over lines is found."""
    return " ".join(text.split())


def numbers(text: str) -> set[float]:
    """Every number written in `text` (a typographic minus read as one), thousands unsplit."""
    found = re.findall(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?", text.replace("−", "-"))
    return {float(n.replace(",", "")) for n in found}


def without_numbers(text: str) -> str:
    """`text` with every number replaced by `#`: what stays the same when only values change."""
    return re.sub(r"[-+−]?\d[\d.,e+-]*", "#", text)
