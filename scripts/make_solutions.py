"""Write the instructor's solved copies of the notebooks: `make solutions`.

The notebooks in notebooks/ are the learner's version: each exercise is a stub, and its
solution waits collapsed below it (exercises/cells.py). This writes a copy of every notebook
with each solution in its stub's place, into solutions/ (or `--out`), ready to run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import nbformat

from exercises.cells import exercise_pairs, solved

ROOT = Path(__file__).resolve().parent.parent


def write_solutions(out_dir: Path, notebooks_dir: Path = ROOT / "notebooks") -> list[Path]:
    """Write each notebook's solved copy to `out_dir`; return the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(notebooks_dir.glob("[0-9][0-9]*_*.ipynb")):
        book = nbformat.read(path, as_version=4)
        target = out_dir / path.name
        nbformat.write(solved(book), target)
        written.append(target)
        print(
            f"{target.relative_to(ROOT) if target.is_relative_to(ROOT) else target}: "
            f"{len(exercise_pairs(book))} exercises solved"
        )
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "solutions", help="default: solutions/")
    write_solutions(parser.parse_args().out.resolve())


if __name__ == "__main__":
    main()
