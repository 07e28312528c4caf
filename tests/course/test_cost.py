"""Issue 17: each spending notebook's estimate, its cloud defaults, and the cap that holds.

The cloud is the local stack here, as in tests/course/test_one_grpo_step.py: the `local_stack`
fixture points the real SDKs at it and sets well-formed keys, so `backend="cloud"` runs
the cloud's code path. Sail's request counters (`get_stats`) show whether anything was
sampled; Tinker keeps no such counter, so for it the test asserts that the run stopped in
the check cell, which comes before `helpers.connect` and so before any Tinker client.
docs/cloud.md and the instructor's guide state each notebook's cloud costs; a test holds
their numbers to the defaults.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from budget.cost import (
    PRICES_PATH,
    Estimate,
    OverBudgetError,
    check_budget,
    check_spent,
    describe_sandboxes,
    estimate,
    estimate_and_cap,
    load_prices,
    sampled_price,
    sampled_tokens,
)
from helpers.notebook_parameters import (
    DEFAULT_BUDGET_SAMPLED_TOKENS,
    NOTEBOOK_PARAMETERS,
    backend_defaults,
)
from local_stack.client.control_client import get_stats
from shell_tasks.tamper import STRATEGIES
from tests.check_cells_support import run_check_cells

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = "04_training_loop.ipynb"


def cloud_settings(notebook: str) -> dict[str, Any]:
    """`notebook`'s declared values, each None replaced by its cloud default (no login is
    checked, as `resolve` would)."""
    declared = {name: p.value for name, p in NOTEBOOK_PARAMETERS[notebook].items()}
    return declared | backend_defaults("cloud", notebook)


CLOUD = cloud_settings("04_training_loop")
FASTER = cloud_settings("07_faster_loops")
SHIP = cloud_settings("09_ship_the_adapter")
SANDBOXED = cloud_settings("08_sandboxed_rollouts")
# What each spending notebook samples and trains on at most with backend="cloud" and its
# defaults, worked out from its cells: (rollouts sampled, rollouts trained on). Every
# rollout samples at most max_tokens = 1,024 tokens.
CLOUD_ROLLOUTS = {
    # a request with a mismatched config, a group of 4, the group again in both windows
    "02_snapshot_and_serve.ipynb": (1 + 4 + 2 * 4, 0),
    # up to three draws of 16 groups of 8; one step on one draw
    "03_one_grpo_step.ipynb": (3 * 16 * 8, 16 * 8),
    # steps of 8 x 8 rollouts (notebook 05 evaluates them)
    NOTEBOOK: (CLOUD["steps"] * 64, CLOUD["steps"] * 64),
    # the held-out evaluation before and after, at notebook 04's cloud sizes
    "05_did_it_learn.ipynb": (2 * CLOUD["eval_problems"] * CLOUD["eval_samples"], 0),
    # three runs and a flex run of 8 x 4 rollouts a step; four models evaluated
    "07_faster_loops.ipynb": (
        (3 * FASTER["steps"] + FASTER["flex_steps"]) * 32
        + 4 * FASTER["train_problems"] * FASTER["eval_samples"],
        (3 * FASTER["steps"] + FASTER["flex_steps"]) * 32,
    ),
    # the first sandboxed group of 8, steps of 8 x 8, the held-out evaluation before and after
    "08_sandboxed_rollouts.ipynb": (
        SANDBOXED["group_size"]
        + SANDBOXED["steps"] * 64
        + 2 * SANDBOXED["eval_tasks"] * SANDBOXED["eval_samples"],
        SANDBOXED["steps"] * 64,
    ),
    # a short run of 8 x 8 rollouts a step; 4 parity problems, twice; the comparison's
    # problems and samples, base and adapter
    "09_ship_the_adapter.ipynb": (
        SHIP["short_run_steps"] * 64 + 2 * 4 + 2 * SHIP["eval_problems"] * SHIP["eval_samples"],
        SHIP["short_run_steps"] * 64,
    ),
}
# Notebook 08's sandboxes with its cloud defaults: {lifetime budget in seconds: how many}: 11
# for the first cells, then four groups of 8 and one per training and held-out rollout.
_ROLLOUTS = SANDBOXED["steps"] * 64 + 2 * SANDBOXED["eval_tasks"] * SANDBOXED["eval_samples"]
# By hand and containment at 120 s, the builder's and the step check's seven cases at 600 s;
# grading one more per graded rollout (120 s; the first group's by the chosen step at 80 s,
# with two per check case) and containment row (90 s); the optional tamper cell's, at 300 s
# and 90 s.
CLOUD_SANDBOXES = {
    80: 8 + 2 * 7,
    90: 2 + len(STRATEGIES),
    120: 1 + 12 + _ROLLOUTS,
    300: 2 * len(STRATEGIES),
    600: 4 * 8 + 7 + _ROLLOUTS,
}


def ceiling(notebook: str) -> int:
    """The most a notebook's cloud defaults can sample, in tokens."""
    return CLOUD_ROLLOUTS[notebook][0] * CLOUD["max_tokens"]


def estimate_line(notebook: str) -> str:
    rollouts, trained = CLOUD_ROLLOUTS[notebook]
    training = f"training on at most {trained:,} rollouts" if trained else "no training"
    return (
        f"estimate: {rollouts:,} rollouts, at most {ceiling(notebook):,} sampled tokens; {training}"
    )


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
    assert (
        "no training" in estimate(sampled_rollouts=3, trained_rollouts=0, max_tokens=5).describe()
    )


def test_prices_file_names_no_price_it_cannot_source() -> None:
    prices = load_prices()
    assert {"date", "source", "note"} <= prices.keys()
    prices_named = [key for key in prices if key.startswith("usd_")]
    assert {
        "usd_per_million_sampled_tokens_balanced",
        "usd_per_million_sampled_tokens_flex",
        "usd_per_million_training_tokens",
        "usd_per_sailbox_creation_size_s",
    } == set(prices_named)  # no price per Sailbox-hour: Sail bills observed usage
    for key in prices_named:
        # A price needs its date and source; there is none offline, so none is given.
        assert prices[key] is None or (prices["date"] and prices["source"])
    assert json.loads(PRICES_PATH.read_text()) == prices


def test_each_completion_window_is_priced_at_its_own_rate() -> None:
    prices = {
        "usd_per_million_sampled_tokens_balanced": 2.0,
        "usd_per_million_sampled_tokens_flex": 1.0,
    }
    assert sampled_price(prices, 10, 0) == 2.0 and sampled_price(prices, 10, 10) == 1.0
    assert sampled_price(prices, 10, 5) == pytest.approx(1.5)
    flex_unknown = {**prices, "usd_per_million_sampled_tokens_flex": None}
    assert sampled_price(flex_unknown, 10, 0) == 2.0  # nothing samples through flex
    assert sampled_price(flex_unknown, 10, 1) is None
    balanced_unknown = {**prices, "usd_per_million_sampled_tokens_balanced": None}
    assert sampled_price(balanced_unknown, 10, 10) == 1.0
    assert sampled_price(balanced_unknown, 10, 9) is None


def test_cap_applies_in_the_cloud_only_and_names_estimate_budget_and_remedy() -> None:
    spend = estimate(sampled_rollouts=648, trained_rollouts=448, max_tokens=1024)
    check_budget(spend, 10, "local")  # nothing is paid for locally
    check_budget(spend, 648 * 1024, "cloud")  # exactly at the budget is allowed
    with pytest.raises(OverBudgetError) as raised:
        check_budget(spend, 1000, "cloud")
    message = str(raised.value)
    assert "663,552" in message and "budget_sampled_tokens = 1,000" in message
    assert "raise budget_sampled_tokens" in message and message.count(".") == 1
    check_spent(10**9, 10, "local", 3)
    with pytest.raises(OverBudgetError, match="stopped after 3 steps with its state saved"):
        check_spent(1001, 1000, "cloud", 3)


def test_estimate_and_cap_prints_every_part_then_refuses_in_the_cloud_only(capsys) -> None:
    parts = {"in 2 steps": 16, "in nothing": 0, "in the evaluation": 4}
    spend = estimate_and_cap("local", 0, max_tokens=10, sampled=parts, trained_rollouts=16)
    assert (spend.rollouts, spend.sampled_tokens, spend.trained_rollouts) == (20, 200, 16)
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        spend.describe(),
        "  rollouts, each at most 10 tokens: 16 in 2 steps, 4 in the evaluation",
    ]
    estimate_and_cap("cloud", 200, max_tokens=10, sampled=parts)
    with pytest.raises(OverBudgetError, match="up to 200 tokens .20 rollouts., over budget"):
        estimate_and_cap("cloud", 199, max_tokens=10, sampled=parts)


def test_sandboxes_are_counted_with_their_lifetime_and_no_price_invented() -> None:
    assert describe_sandboxes({120: 11, 600: 16}, "local") == (
        "sandboxes: 27 local ones, holding at most 10,920 sandbox-seconds"
    )
    cloud = describe_sandboxes({120: 11, 600: 16}, "cloud")
    assert cloud.startswith("Sailboxes: 27 of size s, holding at most 10,920 Sailbox-seconds")
    assert "no price known" in cloud and "budget_sampled_tokens does not cap them" in cloud


def test_sampled_tokens_counts_every_transition_of_every_rollout() -> None:
    def trajectory(*lengths: int) -> SimpleNamespace:
        steps = [SimpleNamespace(ac=SimpleNamespace(tokens=[0] * n)) for n in lengths]
        return SimpleNamespace(transitions=steps)

    groups = [
        SimpleNamespace(trajectories_G=[trajectory(5), trajectory(7, 2)]),
        SimpleNamespace(trajectories_G=[trajectory(0)]),
    ]
    assert sampled_tokens(groups) == 14


def test_each_notebooks_cloud_defaults_fit_the_default_budget() -> None:
    assert (CLOUD["steps"], CLOUD["max_tokens"]) == (7, 1024)
    for notebook in CLOUD_ROLLOUTS:
        assert ceiling(notebook) <= DEFAULT_BUDGET_SAMPLED_TOKENS, notebook


@pytest.mark.parametrize("notebook", list(CLOUD_ROLLOUTS))
def test_cloud_defaults_print_the_estimate_before_any_request_and_fit_the_budget(
    notebook: str, local_stack
) -> None:
    before = get_stats(local_stack.url)
    checked = run_check_cells(notebook, backend="cloud")
    assert checked.error is None, checked.error
    text = checked.printed
    assert estimate_line(notebook) in text and "no price known" in text
    assert "rollouts, each at most 1,024 tokens: " in text
    if notebook == NOTEBOOK:
        assert "backend: cloud   learning rate: 0.0005   max_tokens: 1024" in text
    if notebook == "08_sandboxed_rollouts.ipynb":
        assert describe_sandboxes(CLOUD_SANDBOXES, "cloud") in text
    assert get_stats(local_stack.url) == before


# Each spending notebook, and the most its cloud defaults can sample.
CAPPED = [(notebook, ceiling(notebook)) for notebook in CLOUD_ROLLOUTS]


@pytest.mark.parametrize(("notebook", "ceiling"), CAPPED)
def test_over_budget_cloud_run_stops_in_the_check_cell_with_no_request(
    notebook: str, ceiling: int, local_stack
) -> None:
    before = get_stats(local_stack.url)
    checked = run_check_cells(notebook, backend="cloud", budget_sampled_tokens=1000)
    error = checked.error
    assert isinstance(error, OverBudgetError), error
    assert f"{ceiling:,}" in str(error) and "budget_sampled_tokens = 1,000" in str(error)
    assert ceiling <= DEFAULT_BUDGET_SAMPLED_TOKENS  # the defaults alone are never refused
    assert "helpers.settings(" in checked.failed_source  # the check cell, before connect
    assert get_stats(local_stack.url) == before


def _cost_part(doc: str) -> str:
    """The part of a doc that says what a cloud run costs, up to its next heading."""
    text = (ROOT / doc).read_text()
    start = text.index("What a cloud run costs")
    return text[start : text.index("\n## ", start)]


def _row(text: str, notebook: str) -> list[str]:
    """The cells of a notebook's row in a table of `text`."""
    [row] = [r for r in text.splitlines() if r.startswith(f"| `{Path(notebook).stem}` |")]
    return [cell.strip() for cell in row.split("|")[2:-1]]


@pytest.mark.parametrize("doc", ["docs/cloud.md", "docs/instructor.md"])
def test_the_docs_state_each_notebooks_cloud_costs_as_its_defaults_give_them(doc: str) -> None:
    text = _cost_part(doc)
    for notebook, (rollouts, trained) in CLOUD_ROLLOUTS.items():
        sampled, tokens, trained_on, *_ = _row(text, notebook)
        assert sampled.startswith(f"{rollouts:,}") and tokens == f"{ceiling(notebook):,}"
        assert trained_on.startswith(f"{trained:,} rollouts" if trained else "nothing"), notebook
    row = " ".join(_row(text, "08_sandboxed_rollouts.ipynb"))
    sailboxes = sum(CLOUD_SANDBOXES.values())
    seconds = sum(lifetime * n for lifetime, n in CLOUD_SANDBOXES.items())
    assert f"{sailboxes} Sailboxes" in row and f"{seconds:,} Sailbox-seconds" in row
    flat = " ".join(text.split())
    day = sum(rollouts for rollouts, _ in CLOUD_ROLLOUTS.values())
    assert f"{day:,} rollouts" in flat and f"{day * CLOUD['max_tokens']:,}" in flat
    assert f"{DEFAULT_BUDGET_SAMPLED_TOKENS:,}" in flat


def test_an_estimate_prints_no_repr_under_a_check_cell() -> None:
    shell = InteractiveShell.instance()
    shown, _ = shell.display_formatter.format(Estimate(1, 2, 1, 2, None))
    assert shown == {}


def test_07s_sandbox_count_knows_every_tamper_strategy_and_step_case() -> None:
    from budget.spend import STEP_CHECK_CASES, TAMPER_STRATEGIES
    from exercises.sandboxed_rollouts import _STEP_CASES
    from shell_tasks.tamper import STRATEGIES

    assert len(STRATEGIES) == TAMPER_STRATEGIES
    assert len(_STEP_CASES) == STEP_CHECK_CASES
