"""Two processes, one package: `local_stack/kernel/` runs in a kernel, the rest of
`local_stack/` is the server. The course (helpers, shell_tasks, the notebooks) imports only
the kernel side, and only from its two seams; the server never imports the kernel side; the
kernel side reaches the server only over HTTP, except for the tiny model's shipped files.
"""

from __future__ import annotations

import ast
import graphlib
from collections.abc import Iterator
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
KERNEL_SIDE = "local_stack.kernel"
# The course's two doors to the stack: Tinker and Sail (`connect`), and notebook 07's sandbox.
COURSE_SEAMS = {"helpers/backend.py", "shell_tasks/sandboxes.py"}
# What the kernel side shares with the server: settings and the registry of who uses it,
# and the engine's tiny model, which `local_stack.kernel.tiny_model` alone reads.
SHARED_WITH_THE_SERVER = {"local_stack.config", "local_stack.registry"}
PACKAGES = ("helpers", "kimi", "local_stack", "shell_tasks", "sweeps")


def imported(tree: ast.AST) -> Iterator[str]:
    """The full dotted name of every module (or module member) an import in `tree` names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def python_files(folder: str) -> Iterator[tuple[str, ast.Module]]:
    for path in sorted((ROOT / folder).rglob("*.py")):
        yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def notebook_cells() -> Iterator[tuple[str, ast.Module]]:
    """Each notebook's code cells, without IPython's `%` and `!` lines."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code":
                lines = cell.source.splitlines()
                magic = ("%", "!")
                python = "\n".join(line for line in lines if not line.lstrip().startswith(magic))
                yield f"{path.relative_to(ROOT)}:{cell.get('id')}", ast.parse(python)


def stack_imports(sources: Iterator[tuple[str, ast.Module]]) -> dict[str, set[str]]:
    """For each source that imports `local_stack`, what it imports from it."""
    found: dict[str, set[str]] = {}
    for where, tree in sources:
        names = {name for name in imported(tree) if name.split(".")[0] == "local_stack"}
        if names:
            found[where] = names
    return found


def course_sources() -> Iterator[tuple[str, ast.Module]]:
    yield from python_files("helpers")
    yield from python_files("shell_tasks")
    yield from notebook_cells()


def test_the_course_reaches_the_stack_only_through_its_two_seams() -> None:
    found = stack_imports(course_sources())
    assert set(found) <= COURSE_SEAMS, f"the course imports local_stack elsewhere: {found}"
    assert "helpers/backend.py" in found  # the scan sees the imports it is meant to see


def test_the_course_imports_only_the_kernel_side_of_the_stack() -> None:
    server_side = {
        where: sorted(name for name in names if not name.startswith(f"{KERNEL_SIDE}."))
        for where, names in stack_imports(course_sources()).items()
    }
    assert not any(server_side.values()), f"the course imports the server: {server_side}"


def test_the_server_never_imports_the_kernel_side() -> None:
    """`python -m local_stack` is exempt: it is a human's command line, which starts and
    stops the server through the supervisor."""
    found = {
        where: sorted(name for name in names if name.startswith(KERNEL_SIDE))
        for where, names in stack_imports(python_files("local_stack")).items()
        if not where.startswith("local_stack/kernel/") and where != "local_stack/__main__.py"
    }
    assert not any(found.values()), f"server modules import the kernel side: {found}"


def test_the_kernel_side_reaches_the_server_only_for_the_tiny_models_files() -> None:
    reaches = {}
    for where, names in stack_imports(python_files("local_stack/kernel")).items():
        server = {
            name
            for name in names
            if not name.startswith(f"{KERNEL_SIDE}.")
            and not any(name.startswith(shared) for shared in SHARED_WITH_THE_SERVER)
        }
        if where == "local_stack/kernel/tiny_model.py":
            assert server and all(name.startswith("local_stack.engine.") for name in server)
        elif server:
            reaches[where] = sorted(server)
    assert not reaches, f"kernel-side modules import the server's code: {reaches}"


def test_the_installed_packages_import_one_another_without_a_cycle() -> None:
    depends_on: dict[str, set[str]] = {package: set() for package in PACKAGES}
    for package in PACKAGES:
        for _, tree in python_files(package):
            depends_on[package] |= {
                name.split(".")[0] for name in imported(tree) if name.split(".")[0] in PACKAGES
            } - {package}
    order = list(graphlib.TopologicalSorter(depends_on).static_order())  # raises on a cycle
    assert order.index("local_stack") < order.index("helpers")  # the course builds on it
