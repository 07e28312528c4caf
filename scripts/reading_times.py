"""Each notebook's core path: the words of its markdown cells not tagged `optional`, the
minutes they take to read at `WORDS_PER_MINUTE`, and the non-blank lines of its code cells not
tagged `optional` (hidden cells count: a learner runs them). The instructor guide's
"Core-path reading time" table is this script's output; tests/repo/test_lesson_shape.py
checks that they agree and that each core path fits a slot.

    python scripts/reading_times.py
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
# A careful reading of technical prose with code in it: slower than the 238 words a minute
# usually quoted for non-fiction (Brysbaert 2019), so the guide's times are not optimistic.
WORDS_PER_MINUTE = 150


def core_words(notebook: Path) -> int:
    """Words (runs of non-space characters) in the markdown cells not tagged `optional` (an
    exercise's collapsed solution is tagged so too: it is code, read only by a learner stuck)."""
    cells = nbformat.read(notebook, as_version=4).cells
    return sum(
        len(re.findall(r"\S+", cell.source))
        for cell in cells
        if cell.cell_type == "markdown" and "optional" not in cell.metadata.get("tags", [])
    )


def core_code_lines(notebook: Path) -> int:
    """Non-blank lines in the code cells not tagged `optional` (hidden ones included)."""
    cells = nbformat.read(notebook, as_version=4).cells
    return sum(
        sum(1 for line in cell.source.splitlines() if line.strip())
        for cell in cells
        if cell.cell_type == "code" and "optional" not in cell.metadata.get("tags", [])
    )


def reading_minutes(words: int) -> int:
    return math.ceil(words / WORDS_PER_MINUTE)


def main() -> None:
    print(f"| Notebook | Core-path words | Reading time at {WORDS_PER_MINUTE} words/minute |")
    print("|---|---|---|")
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        words = core_words(notebook)
        print(f"| `{notebook.stem}` | {words:,} | {reading_minutes(words)} min |")


if __name__ == "__main__":
    main()
