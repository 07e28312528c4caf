"""Issue 28: in every notebook the first meaningful output comes within the first 6 code cells.

What counts as meaningful cannot be read off the code, so `FIRST_RESULT` names, per notebook,
the cell that first shows something of the notebook's subject (reviewed by hand; not the
parameters, the parameter check, the connection or a `# @save` definition), and holds that
cell to the first six code cells. Read from the files, nothing run."""

from __future__ import annotations

import pytest

from tests.notebook_source import NOTEBOOK_NAMES, code_cells

FIRST_CODE_CELLS = 6
# Issue 37 asks notebook 04 to define every `# @save` piece of its step before the loop that
# calls it (as d2l does), so that an edited piece is the one the loop runs: its ten pieces,
# the exercise and its check come first, and the loop is its first result.
LATER = {"04_training_loop": 18}
SAVE_MARK = "# @save"

# notebook: (a line of the cell with the first meaningful output, what that output is)
FIRST_RESULT = {
    "01_scoring": ("row = course.train_rows[cfg.example_index]", "a problem rendered as tokens"),
    "02_snapshot_and_serve": (
        "name, ttl_seconds=cfg.ttl_seconds",
        "the sampler checkpoint just written",
    ),
    "03_one_grpo_step": ("trajectory_groups = await sample_with_spread(", "one step's rollouts"),
    "04_training_loop": ("record, _ = await run_step(", "the loop's steps, plotted live"),
    "05_did_it_learn": ('(("base model", eval_before), ("after RL", eval_after))', "the scores"),
    "10_reward_hacking": ("GRADERS = {", "the two runs' skip rates"),
    "06_compare_runs": ("stored = stored_runs(measurement)", "the runs found, with their steps"),
    "07_faster_loops": ("runs[name] = await train_run(", "three schedules' times per step"),
    "08_sandboxed_rollouts": ("task = load_harbor_task(TASK_DIR)", "the task a sandbox runs"),
    "09_ship_the_adapter": ("rank = course.adapter_config", "the run's adapter being shipped"),
}


def test_every_notebook_names_its_first_result() -> None:
    assert sorted(FIRST_RESULT) == NOTEBOOK_NAMES


@pytest.mark.parametrize("name", sorted(FIRST_RESULT))
def test_first_meaningful_output_within_six_code_cells(name: str) -> None:
    needle, shows = FIRST_RESULT[name]
    cells = code_cells(name)
    [position] = [i for i, cell in enumerate(cells, 1) if needle in cell.source]
    allowed = LATER.get(name, FIRST_CODE_CELLS)
    assert position <= allowed, (
        f"{name}: {shows} comes in code cell {position}; issue 28 asks for the first "
        f"meaningful output within the first {allowed} code cells"
    )
    assert not cells[position - 1].source.startswith(SAVE_MARK), "a definition shows nothing"
