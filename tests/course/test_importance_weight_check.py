"""Notebook 04's importance-weight summary and its local check (the optional section's cells).

A step whose groups are all degenerate trains nothing, so its record has no importance
weights. With two groups of two a step skips about one time in four, and in a sweep test's
two-step run both steps once did: the summary's gap came out NaN and the check
`largest < 1e-3` failed as if Sail and Tinker disagreed. The cells run here on records shaped
like `run_step`'s, with nothing sent anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pandas as pd
import pytest
from IPython.display import Markdown

from helpers.notebook_parameters import resolve

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "04_training_loop.ipynb"
GAP_MESSAGE = "the local Sail and Tinker disagree about the logprobs"


def weight_cells() -> list[str]:
    """The summary cell (it lists the diagnostics) and the check cell, in notebook order."""
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    summary = [c.source for c in cells if c.source.startswith("diagnostics = [")]
    check = [c.source for c in cells if GAP_MESSAGE in c.source]
    assert len(summary) == 1 and len(check) == 1, "notebook 04's weight cells moved"
    return [*summary, *check]


def skipped_step(step: int) -> dict:
    """What `run_step` records for a step with nothing to learn from: no optimizer metrics."""
    return {"step": step, "reward": -0.1, "skipped": True, "datums": 0}


def trained_step(step: int, weight_min: float, weight_max: float) -> dict:
    return {
        "step": step,
        "reward": 0.45,
        "skipped": False,
        "datums": 2,
        "optim/importance_weight_min": weight_min,
        "optim/importance_weight_mean": (weight_min + weight_max) / 2,
        "optim/importance_weight_max": weight_max,
        "optim/kl_sample_train_v1": 1e-7,
        "optim/kl_sample_train_v2": 1e-12,
    }


def run_cells(records: list[dict], backend: str = "local", temperature: float = 1.0) -> str:
    """Run the two cells as the kernel would; return the summary sentence they render."""
    shown: list[object] = []
    namespace = {
        "records": records,
        "cfg": resolve("04_training_loop", temperature=temperature),
        "course": SimpleNamespace(backend=backend),
        "pd": pd,
        "Markdown": Markdown,
        "display": shown.append,
    }
    summary, check = weight_cells()
    # IPython runs a cell's statements and shows the value of its last expression.
    *statements, last = ast.parse(summary).body
    assert isinstance(last, ast.Expr), "the summary cell ends with what it renders"
    exec(compile(ast.Module(statements, []), "summary", "exec"), namespace)  # noqa: S102
    rendered = eval(compile(ast.Expression(last.value), "summary", "eval"), namespace)  # noqa: S307
    exec(check, namespace)  # noqa: S102
    assert isinstance(rendered, Markdown)
    return rendered.data


def test_a_run_in_which_no_step_trained_passes_the_check_and_says_why() -> None:
    sentence = run_cells([skipped_step(0), skipped_step(1)])
    assert "nan" not in sentence.lower()
    assert "no step" in sentence.lower() and "degenerate" in sentence


def test_skipped_steps_are_left_out_of_the_gap() -> None:
    sentence = run_cells([skipped_step(0), trained_step(1, 1 - 2e-6, 1 + 3e-6)])
    assert "3.0e-06" in sentence and "nan" not in sentence.lower()


def test_a_real_gap_on_a_trained_step_still_fails_the_check() -> None:
    with pytest.raises(AssertionError, match=GAP_MESSAGE):
        run_cells([skipped_step(0), trained_step(1, 0.97, 1.0)])
    # Off the local backend, or away from temperature 1, the weights may stray: no check.
    run_cells([trained_step(0, 0.97, 1.0)], backend="cloud")
    run_cells([trained_step(0, 0.97, 1.0)], temperature=0.5)
