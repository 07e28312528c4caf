"""Issue 17: notebook 04's spend estimate, its cloud defaults, and the cap that holds.

The cloud is the local stack here, as in tests/test_one_grpo_step.py: the `local_stack`
fixture points the real SDKs at it and sets well-formed keys, so `backend="cloud"` runs
the cloud's code path. Sail's request counters (`get_stats`) show whether anything was
sampled; Tinker keeps no such counter, so for it the test asserts that the run stopped in
the check cell, which comes before `helpers.connect` and so before any Tinker client.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest
from test_notebooks import NOTEBOOKS, finish, papermill

from helpers.cost import (
    DEFAULT_BUDGET_SAMPLED_TOKENS,
    PRICES_PATH,
    check_budget,
    check_spent,
    estimate,
    load_prices,
    sampled_tokens,
)
from helpers.defaults import BACKEND_DEFAULTS, with_defaults
from helpers.errors import CourseConfigError
from local_stack.control.client import get_stats

NOTEBOOK = "04_training_loop.ipynb"
# Notebook 04's cloud defaults: 7 steps x 8 x 8 rollouts, then 50 problems x 2 samples
# scored before and after training, each rollout at most 1,024 tokens.
CLOUD_ROLLOUTS = 7 * 64 + 2 * 50 * 2
CLOUD_SAMPLED_TOKENS = CLOUD_ROLLOUTS * 1024


def test_estimate_is_a_ceiling_with_money_only_where_both_prices_are_known() -> None:
    spend = estimate(sampled_rollouts=10, trained_rollouts=4, max_tokens=100)
    assert (spend.rollouts, spend.sampled_tokens, spend.trained_completion_tokens) == (
        10,
        1000,
        400,
    )
    assert spend.usd is None and "no price known" in spend.describe()
    half = estimate(
        sampled_rollouts=10, trained_rollouts=4, max_tokens=100, usd_per_million_sampled=2.0
    )
    assert half.usd is None  # a sampling-only figure would read as the whole bill
    priced = estimate(
        sampled_rollouts=10,
        trained_rollouts=4,
        max_tokens=100,
        usd_per_million_sampled=2.0,
        usd_per_million_training=5.0,
    )
    assert priced.usd == pytest.approx((1000 * 2.0 + 400 * 5.0) / 1e6)
    assert "at most $0.00" in priced.describe()


def test_prices_file_names_no_price_it_cannot_source() -> None:
    prices = load_prices()
    assert {"date", "source", "note"} <= prices.keys()
    for key in ("usd_per_million_sampled_tokens", "usd_per_million_training_tokens"):
        # A price needs its date and source; there is none offline, so none is given.
        assert prices[key] is None or (prices["date"] and prices["source"])
    assert json.loads(PRICES_PATH.read_text()) == prices


def test_cap_applies_in_the_cloud_only_and_names_estimate_budget_and_remedy() -> None:
    spend = estimate(sampled_rollouts=648, trained_rollouts=448, max_tokens=1024)
    check_budget(spend, 10, "local")  # nothing is paid for locally
    check_budget(spend, CLOUD_SAMPLED_TOKENS, "cloud")  # exactly at the budget is allowed
    with pytest.raises(CourseConfigError) as raised:
        check_budget(spend, 1000, "cloud")
    message = str(raised.value)
    assert "663,552" in message and "budget_sampled_tokens = 1,000" in message
    assert "raise budget_sampled_tokens" in message and message.count(".") == 1
    check_spent(10**9, 10, "local", 3)
    with pytest.raises(CourseConfigError, match="stopped after 3 steps with its state saved"):
        check_spent(1001, 1000, "cloud", 3)


def test_sampled_tokens_counts_every_transition_of_every_rollout() -> None:
    def trajectory(*lengths: int) -> SimpleNamespace:
        steps = [SimpleNamespace(ac=SimpleNamespace(tokens=[0] * n)) for n in lengths]
        return SimpleNamespace(transitions=steps)

    groups = [
        SimpleNamespace(trajectories_G=[trajectory(5), trajectory(7, 2)]),
        SimpleNamespace(trajectories_G=[trajectory(0)]),
    ]
    assert sampled_tokens(groups) == 14


def test_defaults_are_sized_per_backend_and_an_explicit_value_wins() -> None:
    assert with_defaults("cloud", steps=None, max_tokens=None) == {"steps": 7, "max_tokens": 1024}
    assert with_defaults("cloud", steps=30, max_tokens=None)["steps"] == 30
    assert with_defaults("local", steps=None)["steps"] == 90
    cloud = BACKEND_DEFAULTS["cloud"]
    assert (
        CLOUD_ROLLOUTS == cloud["steps"] * 64 + 2 * cloud["eval_problems"] * cloud["eval_samples"]
    )
    assert CLOUD_SAMPLED_TOKENS <= DEFAULT_BUDGET_SAMPLED_TOKENS


def _notebook_up_to_the_check_cell(folder: Path) -> Path:
    """Notebook 04's cells before `helpers.connect`: the parameters and the check cell."""
    notebook = nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4)
    [connect] = [i for i, c in enumerate(notebook.cells) if "helpers.connect(" in c.source]
    notebook.cells = notebook.cells[:connect]
    path = folder / NOTEBOOK
    nbformat.write(notebook, path)
    return path


def _cells(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


def test_cloud_defaults_print_the_estimate_before_any_request_and_fit_the_budget(
    local_stack, tmp_path: Path
) -> None:
    env = {**os.environ, "COURSE_RUNS_DIR": str(tmp_path / "runs")}
    truncated = _notebook_up_to_the_check_cell(tmp_path)
    before = get_stats(local_stack.url)
    out = tmp_path / "out.ipynb"
    code, log = finish(papermill(str(truncated), out, {"backend": "cloud"}, env))
    assert code == 0, log[-3000:]
    text = "".join(_text(c) for c in _cells(out))
    assert "backend: cloud   learning rate: 1e-05   max_tokens: 1024" in text
    assert (
        f"7 steps; estimate: {CLOUD_ROLLOUTS:,} rollouts, at most {CLOUD_SAMPLED_TOKENS:,} "
        "sampled tokens; training on at most 448 rollouts" in text
    )
    assert "no price known" in text
    assert get_stats(local_stack.url) == before


# Each spending notebook with a cap, and the most its cloud defaults can sample: notebook
# 03_one_grpo_step draws 16 x 8 rollouts up to three times.
CAPPED = [(NOTEBOOK, CLOUD_SAMPLED_TOKENS), ("03_one_grpo_step.ipynb", 3 * 16 * 8 * 1024)]


@pytest.mark.parametrize(("notebook", "ceiling"), CAPPED)
def test_over_budget_cloud_run_stops_in_the_check_cell_with_no_request(
    notebook: str, ceiling: int, local_stack, tmp_path: Path
) -> None:
    env = {**os.environ, "COURSE_RUNS_DIR": str(tmp_path / "runs")}
    before = get_stats(local_stack.url)
    out = tmp_path / notebook
    code, _ = finish(
        papermill(notebook, out, {"backend": "cloud", "budget_sampled_tokens": 1000}, env)
    )
    assert code != 0
    cells = [c for c in _cells(out) if c.cell_type == "code"]
    [failed] = [c for c in cells if any(o.output_type == "error" for o in c.get("outputs", []))]
    [error] = [o for o in failed.outputs if o.output_type == "error"]
    assert error.ename == "CourseConfigError"
    assert f"{ceiling:,}" in error.evalue and "budget_sampled_tokens = 1,000" in error.evalue
    assert ceiling <= DEFAULT_BUDGET_SAMPLED_TOKENS  # the defaults alone are never refused
    assert "check_" in failed.source and "helpers.connect(" not in failed.source
    after_failure = cells[cells.index(failed) + 1 :]
    assert all(not c.get("outputs") for c in after_failure)  # nothing later ran
    assert failed.metadata.papermill.duration < 5
    assert get_stats(local_stack.url) == before
