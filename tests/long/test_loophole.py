"""Notebook 10 at its defaults: the reward-hacking test renders, and its prose (the outcome
sentence included) is the counts it stored in runs/<run_name>/state.json.

It trains two runs from the base model, one graded by the guide's step and
one by the fixed one, and counts per step the rollouts that skip `</think>`, those of them
its grader paid as correct, and the well-formed ones. Run again unchanged, the finished
notebook shows the same counts without training anything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from helpers.notebook_parameters import NOTEBOOK_PARAMETERS

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "10_reward_hacking.ipynb"
RUN_NAME = NOTEBOOK_PARAMETERS["10_reward_hacking"]["run_name"].value
LOOPHOLE_STEPS = NOTEBOOK_PARAMETERS["10_reward_hacking"]["loophole_steps"].value
GRADERS = ("guide's grader", "fixed grader")


def run_defaults(out: Path, env: dict[str, str]) -> nbformat.NotebookNode:
    """Notebook 10 under papermill with every parameter at its default."""
    args = [sys.executable, "-m", "papermill", str(NOTEBOOK), str(out), "--cwd"]
    args += [str(NOTEBOOK.parent), "--kernel", "python3", "--no-progress-bar"]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return nbformat.read(out, as_version=4)


def outputs(executed: nbformat.NotebookNode, needle: str) -> list:
    [cell] = [c for c in executed.cells if c.cell_type == "code" and needle in c.source]
    return cell.outputs


def markdown(executed: nbformat.NotebookNode, needle: str) -> str:
    return "".join(o.get("data", {}).get("text/markdown", "") for o in outputs(executed, needle))


def has_image(executed: nbformat.NotebookNode, needle: str) -> bool:
    return any("image/png" in o.get("data", {}) for o in outputs(executed, needle))


def rate(counts: list[dict], key: str) -> float:
    return sum(c[key] for c in counts) / sum(c["rollouts"] for c in counts)


@pytest.mark.timeout(3600)  # the whole default notebook, twice, on a busy shared machine
def test_the_loophole_notebook_renders_its_counts_at_the_defaults(
    run_env: dict[str, str], tmp_path: Path
) -> None:
    executed = run_defaults(tmp_path / "first.ipynb", run_env)
    run_dir = tmp_path / "runs" / RUN_NAME
    state = json.loads((run_dir / "state.json").read_text())

    loophole = state["loophole"]
    assert loophole["steps"] == LOOPHOLE_STEPS > 0
    assert set(loophole["counts"]) == set(GRADERS)
    for counts in loophole["counts"].values():
        assert [c["step"] for c in counts] == list(range(LOOPHOLE_STEPS))
        for c in counts:
            assert c["rollouts"] == 64  # 8 groups of 8, none dropped locally
            assert 0 <= c["skipped_and_paid"] <= c["skipped"] <= c["rollouts"]
            assert 0 <= c["well_formed"] <= c["rollouts"]
    guide, fixed = loophole["counts"]["guide's grader"], loophole["counts"]["fixed grader"]
    # The guide's grader pays rollouts that never closed their thinking; the fixed one cannot.
    assert sum(c["skipped_and_paid"] for c in guide) > 0
    assert sum(c["skipped_and_paid"] for c in fixed) == 0

    assert has_image(executed, "async def graded_run(") and (run_dir / "loophole.png").exists()
    prose = markdown(executed, "def first_and_last(")
    window = min(10, LOOPHOLE_STEPS // 3)
    for label, counts in loophole["counts"].items():
        first, last = rate(counts[:window], "skipped"), rate(counts[-window:], "skipped")
        paid = sum(c["skipped_and_paid"] for c in counts)
        skipped = sum(c["skipped"] for c in counts)
        line = next(line for line in prose.splitlines() if line.startswith(f"- **{label}**"))
        assert f"from {first:.3f} over the first {window} steps to {last:.3f}" in line
        assert f"of the {skipped} rollouts that skipped `</think>`, it paid {paid}" in line
    rose = prose.split("under the guide's grader the skip rate ", 1)[1].startswith("rose")
    fixed_rose = prose.split("Under the fixed grader, which pays no skip, the skip rate ", 1)[1]
    outcome = (  # a rise counts only when the fixed grader's run did not rise too
        "may have exploited the hole"
        if rose and not fixed_rose.startswith("rose")
        else "showed no sign of exploiting the hole beyond its noise"
    )
    assert prose.startswith(f"**The outcome:** in {LOOPHOLE_STEPS} steps, RL {outcome}")

    # Run again, unchanged: the stored counts come back; no training client is made.
    run_infos = sorted((tmp_path / "stack").rglob("run.json"))
    again = run_defaults(tmp_path / "again.ipynb", run_env)
    assert markdown(again, "def first_and_last(") == prose
    assert sorted((tmp_path / "stack").rglob("run.json")) == run_infos
