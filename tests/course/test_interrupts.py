"""Interrupting a cell (Jupyter's stop button) prints one line, and a loop's bar is closed.

These run a real IPython kernel and interrupt it as JupyterLab does (SIGINT through the
kernel manager). The training loop is played by a StepProgress loop that sleeps; the
check with a dead stack instead of an interrupt is in test_stack_watch.py.
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Iterator

import pytest

from tests.kernel_support import bar_styles, loop_cell, run, started_kernel


@pytest.fixture(scope="module")
def kernel() -> Iterator:
    yield from started_kernel()


def run_interrupted(
    kernel, code: str, when_printed: str, after_seconds: float = 1.0
) -> tuple[dict, list[dict], list[dict]]:
    """Run `code` and interrupt the kernel once, `after_seconds` after the cell prints
    `when_printed`.

    Every cue here is followed by a long wait, and a second's delay lands the interrupt inside
    it: sent at once, under load it could arrive while the kernel was still publishing the cue,
    be caught by ipykernel outside the cell, and leave its error to a later test's cell (seen
    in CI beside the cloud rehearsal). Returns the reply, the errors, and every message the
    cell published.
    """
    manager, client = kernel
    seen: list[dict] = []
    interrupted = False

    def interrupt_on_cue(message: dict) -> None:
        nonlocal interrupted
        seen.append(message)
        printed = message["content"].get("text", "") if message["msg_type"] == "stream" else ""
        if when_printed in printed and not interrupted:
            interrupted = True
            time.sleep(after_seconds)
            manager.interrupt_kernel()

    reply, errors = run(client, code, on_message=interrupt_on_cue)
    assert reply["status"] == "error"  # stopped by the interrupt (a Run All stops here)
    return reply, errors, seen


def printed(seen: list[dict]) -> str:
    return "".join(m["content"]["text"] for m in seen if m["msg_type"] == "stream")


@pytest.mark.parametrize("blocking", [False, True], ids=["awaiting", "blocking"])
@pytest.mark.parametrize("interactive", [True, False], ids=["tqdm-bar", "plain-lines"])
def test_interrupted_loop_says_how_far_it_got_in_one_line(kernel, blocking, interactive):
    _, errors, seen = run_interrupted(kernel, loop_cell(blocking, interactive), "step 1")
    [error] = errors
    line = "interrupted after 2 of 5 steps; run the notebook again to resume"
    assert (error["ename"], error["evalue"]) == ("KeyboardInterrupt", line)
    assert error["traceback"] == [f"KeyboardInterrupt: {line}"]
    if interactive:  # the bar was closed: short of its total, tqdm shows it red, not running
        assert bar_styles(seen)[-1] == "danger"
    else:  # under papermill: the steps' plain lines, and nothing after them but the error
        assert printed(seen).splitlines() == ["[1/5] step 0", "[2/5] step 1"]


@pytest.mark.parametrize(
    "cell",
    [
        # 'go' and the wait share line 3, and the interrupt comes a second after 'go': one
        # that lands while print is still flushing is raised in IPython's output machinery,
        # not the cell, and shows a full traceback (both seen under load).
        "import asyncio\n\nprint('go', flush=True); await asyncio.sleep(120)",
        "import time\n\nprint('go', flush=True); time.sleep(120)",
    ],
    ids=["awaiting", "blocking"],
)
def test_interrupt_outside_a_loop_is_one_line_naming_the_cell_line(kernel, cell):
    _, errors, _ = run_interrupted(kernel, cell, "go")
    [error] = errors
    assert error["ename"] == "KeyboardInterrupt"
    assert error["traceback"] == ["KeyboardInterrupt: interrupted at line 3 of the cell"]


def test_a_loop_closed_in_a_finally_still_says_how_far_it_got(kernel):
    """Closing the bar in `finally` (before the error is shown) loses nothing."""
    cell = "try:\n" + textwrap.indent(loop_cell(blocking=False, interactive=False), "    ")
    cell += "finally:\n    progress.close()\n"
    _, errors, _ = run_interrupted(kernel, cell, "step 1")
    assert errors[0]["traceback"] == [
        "KeyboardInterrupt: interrupted after 2 of 5 steps; run the notebook again to resume"
    ]


def test_a_finished_loop_is_not_claimed_by_a_later_interrupt_in_its_cell(kernel):
    cell = loop_cell(blocking=False, interactive=False, steps=2)
    cell += "print('loop done', flush=True)\nawait asyncio.sleep(120)\n"
    _, errors, _ = run_interrupted(kernel, cell, "loop done")
    last_line = len(cell.splitlines())  # the sleep after the loop
    assert errors[0]["traceback"] == [
        f"KeyboardInterrupt: interrupted at line {last_line} of the cell"
    ]


def test_loop_a_failed_cell_left_open_is_not_claimed_later(kernel):
    """A loop that failed some other way is not the loop of the next interrupted cell."""
    _, client = kernel
    reply, errors = run(
        client,
        "from notebook_ui.progress import StepProgress\n"
        "progress = StepProgress(total=5)\nprogress.step_done('step 0')\n1 / 0",
    )
    assert [e["ename"] for e in errors] == ["ZeroDivisionError"]
    _, errors, _ = run_interrupted(kernel, "import time\nprint('go')\ntime.sleep(120)", "go")
    assert errors[0]["traceback"] == ["KeyboardInterrupt: interrupted at line 3 of the cell"]


def test_a_cancelled_error_of_the_cells_own_keeps_its_traceback(kernel):
    """Only an interrupt is shortened: a cell that awaits a task it cancelled has a bug."""
    _, client = kernel
    reply, errors = run(
        client,
        "import asyncio\ntask = asyncio.ensure_future(asyncio.sleep(60))\n"
        "await asyncio.sleep(0)\ntask.cancel()\nawait task",
    )
    assert reply["status"] == "error"
    [error] = errors
    assert error["ename"] == "CancelledError"
    assert len(error["traceback"]) > 1  # IPython's usual traceback
