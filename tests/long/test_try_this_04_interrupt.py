"""Notebook 04's first "Try this", as the bullet says: interrupt the kernel in the middle of
the loop, then run all cells again, unchanged; the run continues where it stopped, and
`metrics.jsonl` holds each step once.

The notebook's code cells run one by one in a real IPython kernel started in notebooks/, as
JupyterLab runs them, with small parameters set in a cell after the parameters cell (as
papermill sets them). The interrupt is Jupyter's: SIGINT through the kernel manager
(`interrupt_kernel`), sent once the loop has printed its second step. A Run All stops at the
interrupted cell; the second Run All is the same cells in the same kernel.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from local_stack.client.supervisor import stop_local_stack
from tests.kernel_support import run, started_kernel
from tests.notebook_support import NOTEBOOKS, SMALL_PARAMETERS, kernel_env, metrics_steps

NOTEBOOK = "04_training_loop.ipynb"
RUN_NAME = "interrupted"
STEPS = 4
PARAMETERS = {**SMALL_PARAMETERS[NOTEBOOK], "steps": STEPS, "run_name": RUN_NAME}
LOOP_CELL = "for step in range(done, cfg.steps):"
CELL_TIMEOUT_S = 900  # a busy two-core machine; no duration is asserted


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("interrupt-04")
    yield folder
    stop_local_stack(folder / "stack")  # the stack the kernel started outlives it


def code_cells() -> list[str]:
    """The notebook's code cells, with a papermill-style cell of `PARAMETERS` after the
    parameters cell."""
    cells = nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4).cells
    sources = []
    for cell in cells:
        if cell.cell_type == "code":
            sources.append(cell.source)
            if "parameters" in cell.metadata.get("tags", []):
                sources.append("\n".join(f"{k} = {v!r}" for k, v in PARAMETERS.items()))
    return sources


def run_all(client, manager=None, interrupt_after: str = "") -> tuple[str, list[dict]]:
    """Run every code cell in turn until one fails (as Run All does). With `manager`, interrupt
    the kernel once the loop cell prints `interrupt_after`. What the cells printed, and the
    errors of the cell that stopped the run (none if every cell ran)."""
    printed: list[str] = []
    cue = {"armed": False}

    def watch(message: dict) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
            if cue["armed"] and interrupt_after in message["content"]["text"]:
                manager.interrupt_kernel()
                cue["armed"] = False

    for source in code_cells():
        cue["armed"] = manager is not None and LOOP_CELL in source
        reply, errors = run(client, source, CELL_TIMEOUT_S, watch)
        if reply["status"] != "ok":
            return "".join(printed), errors
    return "".join(printed), []


def test_an_interrupted_loop_resumes_where_it_stopped_and_logs_each_step_once(folder) -> None:
    kernel = started_kernel(NOTEBOOKS, kernel_env(folder))
    manager, client = next(kernel)
    try:
        first, errors = run_all(client, manager, interrupt_after=f"[2/{STEPS}]")
        [error] = errors  # the loop cell stopped the Run All, with one line
        assert error["ename"] == "KeyboardInterrupt", error
        found = re.fullmatch(
            rf"interrupted after (\d+) of {STEPS} steps; run the notebook again to resume",
            error["evalue"],
        )
        assert found and error["traceback"] == [f"KeyboardInterrupt: {error['evalue']}"]
        stopped_at = int(found.group(1))
        state = json.loads((folder / "runs" / RUN_NAME / "state.json").read_text())
        assert 2 <= stopped_at == state["completed_steps"] < STEPS  # in the middle of the loop
        assert f"starting {RUN_NAME!r} from the base model" in first

        again, errors = run_all(client)
        assert errors == []
        assert f"resuming {RUN_NAME!r} after step {stopped_at - 1} from " in again
        steps_run = [int(n) for n in re.findall(rf"\[\d+/{STEPS}\] step +(\d+) \|", again)]
        assert steps_run == list(range(stopped_at, STEPS))  # it continues at step N
    finally:
        next(kernel, None)  # shut the kernel down
    assert metrics_steps(folder / "runs", RUN_NAME) == list(range(STEPS))  # each step once
