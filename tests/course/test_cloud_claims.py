"""What the cloud path claims: its learning rate is the cookbook's for Kimi K2.6 LoRA, and its
adapter-vs-base asserts run only where the measured effect clears the noise."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat
import tinker_cookbook

from helpers.inspect_step import sign_check
from helpers.notebook_parameters import backend_defaults
from helpers.shipping import separation

ROOT = Path(__file__).resolve().parents[2]


def test_the_cloud_learning_rate_is_the_cookbooks_for_kimi_lora() -> None:
    readme = Path(tinker_cookbook.__file__).parent / "weights" / "README.md"
    lines = readme.read_text().splitlines()
    [row] = [line for line in lines if line.startswith("| **Kimi-K2.6** | ~")]
    lora_lr = float(re.search(r"~([0-9.e-]+)", row.split("|")[2]).group(1))
    assert backend_defaults("cloud")["learning_rate"] == lora_lr == 5e-4


def test_separation_and_sign_checks() -> None:
    adapter, base = [[-1.0, -2.0]], [[-1.5, -2.5]]
    assert separation(adapter, base, sampler=[[-1.001, -2.001]]).decisive
    blurred = separation(adapter, base, sampler=[[-1.3, -2.3]])
    assert not blurred.decisive and "shown, not asserted" in blurred.sentence()
    assert sign_check([0.5, 0.6, 0.55] * 3, [-0.4, -0.5, -0.45] * 3).decisive
    noisy = sign_check([0.5, -0.4, 0.1] * 3, [-0.4, 0.5, -0.05] * 3)
    assert not noisy.decisive and "not asserted" in noisy.sentence()
    # Two values apiece can have a tiny standard error by chance (the rehearsal's case).
    few = sign_check([0.0057, 0.006], [-0.76, -0.75])
    assert not few.decisive and "as few as 2" in few.sentence()


def _guards(node: ast.AST, assertion: str, tests: tuple[str, ...] = ()) -> list[str]:
    """The conditions under which each `assert <assertion>` below `node` runs."""
    if isinstance(node, ast.Assert) and ast.unparse(node.test) == assertion:
        return [" and ".join(tests) or "(always)"]
    found = []
    for child in ast.iter_child_nodes(node):
        inner = tests
        if isinstance(node, ast.If):
            test = ast.unparse(node.test)
            inner = (*tests, f"not ({test})" if child in node.orelse else test)
        found += _guards(child, assertion, inner)
    return found


def _guard_of(notebook: str, assertion: str) -> str:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    for cell in nbformat.read(ROOT / "notebooks" / notebook, 4).cells:
        if cell.cell_type == "code" and assertion in cell.source:
            [guard] = _guards(compile(cell.source, notebook, "exec", flags=flags), assertion)
            return guard
    raise AssertionError(f"{assertion!r} is not in {notebook}")


def test_cloud_adapter_vs_base_asserts_need_a_measured_effect() -> None:
    for notebook, assertion in [
        ("09_ship_the_adapter.ipynb", "adapter_gap < base_gap"),
        ("09_ship_the_adapter.ipynb", "named_gap < named_base_gap"),
    ]:
        guard = _guard_of(notebook, assertion)
        assert "decisive" in guard, (notebook, assertion, guard)


def test_notebook_03_shows_the_signs_of_one_step_and_asserts_none() -> None:
    """One random step's signs are a claim about chance: notebook 03 shows them, and
    tests/course/test_one_grpo_step.py checks them over seeds."""
    cells = nbformat.read(ROOT / "notebooks" / "03_one_grpo_step.ipynb", 4).cells
    assert not any("assert mean_positive" in c.source for c in cells if c.cell_type == "code")
