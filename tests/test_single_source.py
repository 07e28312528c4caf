"""Code a notebook teaches in a `# @save` cell must be the code `helpers` runs.

Each top-level definition in a `# @save` cell is compared, after parsing, with the
definition of the same name in `helpers/`. A module that a notebook teaches in full
(listed in TAUGHT_IN_FULL) must also have no definition the notebook leaves out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
TAUGHT_IN_FULL = {
    "01_scoring.ipynb": ROOT / "helpers" / "scoring.py",
    "02_snapshot_and_serve.ipynb": ROOT / "helpers" / "serving.py",
    "03_training_loop.ipynb": ROOT / "helpers" / "training.py",
    "03_one_grpo_step.ipynb": ROOT / "helpers" / "inspect_step.py",
}


def _definitions(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found[node.name] = ast.unparse(node)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name) and target.id.isupper():
                found[target.id] = ast.unparse(node)
    return found


def saved_definitions(path: Path) -> dict[str, str]:
    cells = nbformat.read(path, as_version=4).cells
    saved = [c.source for c in cells if c.cell_type == "code" and c.source.startswith("# @save")]
    return _definitions(ast.parse("\n".join(saved)))


def helpers_definitions() -> dict[str, list[str]]:
    """Every top-level definition in helpers/, by name (a name may live in several modules)."""
    found: dict[str, list[str]] = {}
    for module in sorted((ROOT / "helpers").rglob("*.py")):
        for name, source in _definitions(ast.parse(module.read_text())).items():
            found.setdefault(name, []).append(source)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_cells_match_helpers(path: Path) -> None:
    in_helpers = helpers_definitions()
    for name, source in saved_definitions(path).items():
        assert name in in_helpers, f"{path.name} saves {name}, which helpers/ does not define"
        assert source in in_helpers[name], f"{name}: {path.name} and helpers/ differ"


@pytest.mark.parametrize("notebook", sorted(TAUGHT_IN_FULL))
def test_module_taught_in_full(notebook: str) -> None:
    module = TAUGHT_IN_FULL[notebook]
    taught = saved_definitions(ROOT / "notebooks" / notebook)
    missing = set(_definitions(ast.parse(module.read_text()))) - set(taught)
    assert not missing, f"{module.name} defines {sorted(missing)}, which {notebook} never shows"
