"""Notebook 07's containment check holds on a local machine where the sandbox totals do not.

Without root the local sandbox cannot enforce its per-sandbox totals (memory, disk): the limits
hold per process, `memory_peak_bytes()` is None, and the memory and disk rows finish without
"Killed" or "No space left". The check cell must then skip those rows rather than crash, and
still check them where the totals are enforced. The cell runs here as the notebook has it.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nbformat
import pytest

from local_stack.client.sailbox.isolation import ResourceLimits
from tests.containment_support import containment_table

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "07_sandboxed_rollouts.ipynb"
CHECK_CELL = "containment-checked"

# What the local sandbox's table shows when the notebook does not run as root: every row as
# with root, except that the eight allocations and the 800 MiB of small files all succeed.
PER_PROCESS_ROWS = {
    "infinite loop": {"exit code": 124, "timed out": True, "returned after (s)": 2.0},
    "fork bomb": {
        "exit code": 124,
        "timed out": True,
        "returned after (s)": 3.0,
        "stderr (telling line)": "bash: fork: retry: Resource temporarily unavailable",
    },
    "1 GB of output": {"stdout bytes": 1000, "stdout (head)": "xxxx"},
    "memory: 8 x 200 MiB": {"stderr (telling line)": ""},
    "disk: 8 x 100 MiB in 1 MiB files": {"stdout (head)": "801"},
    "network call": {"stderr (telling line)": "ConnectionRefusedError: Connection refused"},
    "write outside the workdir": {
        "stderr (telling line)": "bash: /tmp/escaped.txt: Read-only file system"
    },
    "background process": {
        "stdout (head)": "started 3",
        "afterwards": "0 'sleep 300' running in its next command",
    },
    "read your secrets": {"stdout (head)": "canary: 0, key names: 0"},
    "fake the grade": {"stdout (head)": "planted", "afterwards": "graded reward 0.0"},
    "fake it from ~/.profile": {"afterwards": "graded reward 0.0"},
    "the same, graded in its own sandbox": {"afterwards": "graded reward 1.0"},
}


def run_check_cell(totals_enforced: bool) -> dict[str, Any]:
    [cell] = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.get("id") == CHECK_CELL]
    namespace = {
        "containment": containment_table(PER_PROCESS_ROWS),
        "course": SimpleNamespace(backend="local"),
        "left": [],
        "limits": ResourceLimits(),
        "totals_enforced": totals_enforced,
        "memory_peak": None,  # what `memory_peak_bytes()` returns without the totals
    }
    code = compile(cell.source, CHECK_CELL, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    exec(code, namespace)  # noqa: S102 - the course's own notebook cell
    return namespace


def test_the_check_cell_passes_where_the_limits_hold_per_process(capsys) -> None:
    run_check_cell(totals_enforced=False)
    assert "every claim below holds for this run" in capsys.readouterr().out


def test_the_check_cell_still_checks_the_totals_where_they_are_enforced() -> None:
    with pytest.raises(AssertionError):  # the memory row shows no "Killed"
        run_check_cell(totals_enforced=True)
