"""The seam between the course and the local stack, as issue 9 draws it: the stack imports
nothing from the course, and `helpers` loads the stack only inside the calls that use it,
so that the cloud path never does."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COURSE_PACKAGES = ("helpers", "shell_tasks", "sweeps", "bench", "scripts", "tests")


def imported(node: ast.AST) -> Iterator[str]:
    """The top-level package of every import statement in `node`, however deep."""
    for child in ast.walk(node):
        if isinstance(child, ast.Import):
            yield from (alias.name.split(".")[0] for alias in child.names)
        elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
            yield child.module.split(".")[0]


def parsed(package: str) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        yield path.relative_to(ROOT), ast.parse(path.read_text(), str(path))


def test_the_stack_imports_nothing_from_the_course() -> None:
    found = {
        f"{path}: {name}"
        for path, module in parsed("local_stack")
        for name in imported(module)
        if name in COURSE_PACKAGES
    }
    assert not found


def run_on_import(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that run when the module is imported: all but function bodies."""
    for statement in body:
        if isinstance(statement, ast.ClassDef):
            yield from run_on_import(statement.body)
        elif not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            yield statement


def test_helpers_load_the_stack_only_inside_the_calls_that_use_it() -> None:
    on_import = {
        str(path)
        for path, module in parsed("helpers")
        for statement in run_on_import(module.body)
        if "local_stack" in imported(statement)
    }
    assert not on_import
