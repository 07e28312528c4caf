"""How an exercise sits in a notebook, and the solved copy an instructor makes from it.

Three cells, in this order:

1. the stub: a code cell tagged `exercise`, with the function's signature, its docstring and
   a body that raises NotImplementedError (after a `# YOUR CODE HERE` line). A piece the
   course saves to `helpers/` keeps its `# @save` first line;
2. the check, right below: `name = await check(EXERCISE, name, ...)`, which prints whose code
   the cells below use;
3. the solution: a markdown cell tagged `solution`, collapsed in a `<details>` block, with
   the whole function in one ```python block (between nbgrader-style `### BEGIN SOLUTION`
   and `### END SOLUTION` lines, which it keeps).

`solved(notebook)` puts each solution in place of its stub: `make solutions` writes those
copies, and `make helpers` exports a saved stub's solution, so that the notebook stays the
one source of the code it teaches.
"""

from __future__ import annotations

import copy
import re

import nbformat

EXERCISE_TAG, SOLUTION_TAG = "exercise", "solution"
SAVE_MARK = "# @save"
_CODE = re.compile(r"```python\n(.*?)```", re.DOTALL)
_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")


def tagged(cell: nbformat.NotebookNode, tag: str) -> bool:
    return tag in cell.get("metadata", {}).get("tags", [])


def solution_code(cell: nbformat.NotebookNode) -> str:
    """The code of a solution cell, without its BEGIN/END marker lines."""
    [code] = _CODE.findall(cell.source)
    lines = [line for line in code.splitlines() if line.strip() not in _MARKERS]
    return "\n".join(lines).strip()


def exercise_pairs(
    book: nbformat.NotebookNode,
) -> list[tuple[int, nbformat.NotebookNode, nbformat.NotebookNode]]:
    """Each stub cell's index, the stub and its solution (the next solution cell after it)."""
    pairs = []
    for index, cell in enumerate(book.cells):
        if cell.cell_type == "code" and tagged(cell, EXERCISE_TAG):
            later = book.cells[index + 1 :]
            solution = next((c for c in later if tagged(c, SOLUTION_TAG)), None)
            if solution is None:
                raise ValueError(f"the exercise in cell {cell.get('id')} has no solution cell")
            pairs.append((index, cell, solution))
    return pairs


def solved_source(stub: nbformat.NotebookNode, solution: nbformat.NotebookNode) -> str:
    """The stub cell's source with the solution in place (its `# @save` line kept)."""
    saved = stub.source.partition("\n")[0].strip() == SAVE_MARK
    return (SAVE_MARK + "\n" if saved else "") + solution_code(solution)


def solved(book: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """A copy of `book` with every exercise's solution in its stub's place."""
    book = copy.deepcopy(book)
    for index, stub, solution in exercise_pairs(book):
        book.cells[index].source = solved_source(stub, solution)
    return book
