"""Notebook 04's importance-weight summary (the optional section's cell), on records shaped
like `run_step`'s, with nothing sent anywhere.

A step whose groups are all degenerate trains nothing, so its record has no importance
weights. With two groups of two a step skips about one time in four, and in a sweep test's
two-step run both steps once did: the summary's gap came out NaN, and a check on it would
fail as if Sail and Tinker disagreed. The gap the summary computes, `largest`, is what
tests/long/test_notebook_04_claims.py reads from a run at the defaults.
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


def summary_cell() -> str:
    """The summary cell: the one that lists the diagnostics."""
    cells = nbformat.read(NOTEBOOK, as_version=4).cells
    [summary] = [c.source for c in cells if "diagnostics = [" in c.source]
    return summary


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


def run_summary(records: list[dict]) -> tuple[str, dict]:
    """Run the cell as the kernel would: the sentence it renders, and its namespace."""
    shown: list[object] = []
    namespace = {
        "records": records,
        "cfg": resolve("04_training_loop"),
        "course": SimpleNamespace(backend="local"),
        "pd": pd,
        "Markdown": Markdown,
        "display": shown.append,
    }
    # IPython runs a cell's statements and shows the value of its last expression.
    *statements, last = ast.parse(summary_cell()).body
    assert isinstance(last, ast.Expr), "the summary cell ends with what it renders"
    exec(compile(ast.Module(statements, []), "summary", "exec"), namespace)  # noqa: S102
    rendered = eval(compile(ast.Expression(last.value), "summary", "eval"), namespace)  # noqa: S307
    assert isinstance(rendered, Markdown)
    return rendered.data, namespace


def test_a_run_in_which_no_step_trained_says_why_and_has_no_gap() -> None:
    sentence, namespace = run_summary([skipped_step(0), skipped_step(1)])
    assert "nan" not in sentence.lower()
    assert "no step" in sentence.lower() and "degenerate" in sentence
    assert namespace["weights"].empty and "largest" not in namespace


def test_skipped_steps_are_left_out_of_the_gap() -> None:
    sentence, namespace = run_summary([skipped_step(0), trained_step(1, 1 - 2e-6, 1 + 3e-6)])
    assert "3.0e-06" in sentence and "nan" not in sentence.lower()
    assert namespace["largest"] == pytest.approx(3e-6)


def test_a_real_gap_on_a_trained_step_is_the_largest() -> None:
    sentence, namespace = run_summary([skipped_step(0), trained_step(1, 0.97, 1.0)])
    assert "3.0e-02" in sentence
    assert namespace["largest"] == pytest.approx(0.03)
