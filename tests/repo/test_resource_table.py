"""docs/local-stack.md's resource table: every row names the tests that hold it, and every
test it names exists, so renaming or deleting a test cannot leave the table pointing at
nothing. A row still waiting for another change's tests says "(bounds)"."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE_HEADING = "## Resources a client can hold"
# `stack/test_x.py`, `stack/test_x.py::test_name`, or `::test_name` (same file as before).
TEST_REFERENCE = re.compile(r"`((?:\w+/)*test_\w+\.py)?(?:::(test_\w+))?`")


def table_rows() -> list[list[str]]:
    """The cells of each resource row (not the header, rule or group rows)."""
    text = (ROOT / "docs" / "local-stack.md").read_text()
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split("|") for line in section.splitlines() if line.startswith("|")]
    return [cells for cells in rows[2:] if not cells[0].strip().startswith("**")]


def functions_in(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_row_names_tests_that_exist() -> None:
    rows = table_rows()
    assert len(rows) >= 20
    checked = 0
    for cells in rows:
        resource, test_cell = cells[0].strip(), cells[-1]
        references = TEST_REFERENCE.findall(test_cell)
        assert references or "(bounds)" in test_cell, f"{resource}: names no test"
        current = None
        for file, function in references:
            current = ROOT / "tests" / file if file else current
            assert current is not None and current.is_file(), f"{resource}: no {file}"
            if function:
                assert function in functions_in(current), f"{resource}: no {function}"
            checked += 1
    assert checked >= len(rows)  # the references were read, not skipped
