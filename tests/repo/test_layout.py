"""What the import contracts (`lint-imports`, pyproject.toml) cannot see: when an import runs,
and the notebooks, which are not Python files.

The cloud path must not start, or even load, the local stack: `helpers` imports it only
inside the calls that use it (`connect("local")` and the tiny model's files)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
# A line of a cell that imports the stack: `import local_stack...` or `from local_stack...`.
STACK_IMPORT = re.compile(r"^\s*(?:import|from)\s+local_stack\b", re.MULTILINE)


def test_importing_every_helpers_module_loads_no_part_of_the_stack() -> None:
    script = (
        "import importlib, pkgutil, sys, helpers\n"
        "for module in pkgutil.iter_modules(helpers.__path__):\n"
        "    importlib.import_module(f'helpers.{module.name}')\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'local_stack'))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "[]"


def test_no_notebook_imports_the_stack() -> None:
    """The course reaches the stack through `helpers.backend` alone (its contract in
    pyproject.toml), in the notebooks too."""
    found = [
        f"{path.name}: {match.group().strip()}"
        for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == "code"
        for match in STACK_IMPORT.finditer(cell.source)
    ]
    assert not found
