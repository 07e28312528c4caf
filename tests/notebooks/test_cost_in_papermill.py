"""Cloud costs in whole notebook runs: the budget stops a cloud run mid-way and the run
resumes, and notebook 02 sends no more requests than its estimate counts (the estimates
themselves and the check cells are tests/course/test_cost.py; that notebook 08 creates the
sandboxes its check cell counts is read from its solved run, in test_notebook_08_platforms.py)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from local_stack.client.control_client import get_stats
from tests.cloud_support import cloud_kernel_env
from tests.notebook_support import finish, papermill

NOTEBOOK = "04_training_loop.ipynb"


def _cells(path: Path) -> list:
    return nbformat.read(path, as_version=4).cells


def _text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


# An estimate that counts one token per rollout. The check cell's ceiling bounds what a run
# can sample, so with a true estimate the count during the run never passes a budget the
# check let through; this start-up file makes the estimate wrong, as a future change to the
# notebook could, to show that the count during the run still stops it.
UNDER_COUNTING_ESTIMATE = """
import budget.cost as cost

_priced_estimate = cost.priced_estimate
cost.priced_estimate = lambda **counts: _priced_estimate(**{**counts, "max_tokens": 1})
"""


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_cloud_run_passing_its_budget_mid_way_stops_saved_and_resumes(
    local_stack, tmp_path: Path
) -> None:
    """Notebook 04 in the cloud stops after the step whose rollouts pass the budget, with its
    state saved and one sentence; run again with a raised budget, it resumes after it."""
    env = cloud_kernel_env(tmp_path)
    hook = Path(env["IPYTHONDIR"]) / "profile_default" / "startup" / "01-under-counting.py"
    hook.write_text(UNDER_COUNTING_ESTIMATE)
    steps, max_tokens = 6, 24
    budget = 8 * max_tokens  # what one step of 2 x 4 rollouts can sample at most
    parameters = {
        "backend": "cloud",
        "steps": steps,
        "group_size": 2,
        "groups_per_step": 4,
        "max_tokens": max_tokens,
        "eval_problems": 4,
        "eval_samples": 1,
        "run_name": "capped",
        "budget_sampled_tokens": budget,
    }
    out = tmp_path / "stopped.ipynb"
    code, log = finish(papermill(NOTEBOOK, out, parameters, env))
    assert code != 0, log[-3000:]
    run = tmp_path / "runs" / "capped"
    stopped = _metrics(run)
    spent = [sum(r["sampled_tokens"] for r in stopped[: i + 1]) for i in range(len(stopped))]
    # It stopped after the first step that passed the budget, before the last step.
    assert 2 <= len(stopped) < steps and spent[-2] <= budget < spent[-1]
    state = json.loads((run / "state.json").read_text())
    assert state["completed_steps"] == len(stopped) and state["checkpoint"]
    assert "eval_after" not in state
    cells = [c for c in _cells(out) if c.cell_type == "code"]
    [failed] = [c for c in cells if any(o.output_type == "error" for o in c.get("outputs", []))]
    [error] = [o for o in failed.outputs if o.output_type == "error"]
    assert "check_spent(" in failed.source and len(error.traceback) == 1
    assert (error.ename, error.evalue) == (
        "OverBudgetError",
        f"this cloud run has sampled {spent[-1]:,} tokens, over budget_sampled_tokens = "
        f"{budget:,}, so it stopped after {len(stopped)} steps with its state saved; raise "
        "budget_sampled_tokens and run again to resume.",
    )
    assert all(not c.get("outputs") for c in cells[cells.index(failed) + 1 :])
    assert f"step {len(stopped) - 1:3d} | reward" in _text(failed)  # its line is shown too

    hook.unlink()  # the true estimate from here on: 1,344 tokens at most, well in budget
    out = tmp_path / "resumed.ipynb"
    resumed = {**parameters, "budget_sampled_tokens": 1_000_000}
    code, log = finish(papermill(NOTEBOOK, out, resumed, env))
    assert code == 0, log[-3000:]
    text = "".join(_text(c) for c in _cells(out))
    assert f"resuming 'capped' after step {len(stopped) - 1} from " in text
    records = _metrics(run)
    assert [r["step"] for r in records] == list(range(steps))
    assert records[: len(stopped)] == stopped  # nothing before the stop ran again
    assert json.loads((run / "state.json").read_text())["completed_steps"] == steps


def test_02_in_the_cloud_samples_what_its_estimate_counts(local_stack, tmp_path: Path) -> None:
    """Every request notebook 02 sends to Sail on the cloud path is in its estimate."""
    env = cloud_kernel_env(tmp_path)
    before = get_stats(local_stack.url)["requests"]
    out = tmp_path / "out.ipynb"
    parameters = {"backend": "cloud", "group_size": 2, "max_tokens": 32}
    code, log = finish(papermill("02_snapshot_and_serve.ipynb", out, parameters, env))
    assert code == 0, log[-3000:]
    text = "".join(_text(c) for c in _cells(out))
    assert "estimate: 7 rollouts, at most 224 sampled tokens; no training" in text
    # The group and the group in each window; the local stack refuses the mismatched
    # config before sampling, which the estimate counts in case the cloud does not.
    assert get_stats(local_stack.url)["requests"] - before == 3 * 2
