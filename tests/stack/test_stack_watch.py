"""A dead local stack stops the running cell within seconds, in one sentence.

These run a real IPython kernel with the watcher pointed at a stand-in process (`sleep`),
so a death can be staged in any state of the kernel without starting the stack. The
notebook-level check, with the real stack SIGKILLed mid-run, is in
tests/notebooks/test_notebooks.py.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_stack.client.watch import LATE_CELL_GRACE_SECONDS
from tests.kernel_support import bar_styles, loop_cell, run, started_kernel

LOG = Path("/nonexistent/stack/stack.log")  # only quoted, never opened


@pytest.fixture(scope="module")
def kernel() -> Iterator:
    """One kernel for the module: each test's `watch` replaces the previous test's watch."""
    yield from started_kernel()


@pytest.fixture
def stand_in() -> Iterator[subprocess.Popen]:
    """A process playing the stack's server; the test kills it."""
    process = subprocess.Popen(["sleep", "600"])
    yield process
    process.kill()
    process.wait()


def watch(client, process: subprocess.Popen) -> None:
    run(
        client,
        f"import helpers\nfrom local_stack.client.watch import watch_local_stack\n"
        f"watch_local_stack({process.pid}, __import__('pathlib').Path({str(LOG)!r}))",
    )


def kill_after(process: subprocess.Popen, seconds: float) -> None:
    """Kill the stand-in from a timer, while the test's thread waits on the cell."""
    threading.Timer(seconds, process.kill).start()


def assert_stopped_in_one_sentence(reply: dict, errors: list[dict]) -> None:
    assert reply["status"] == "error"
    [error] = errors
    assert error["ename"] == "LocalStackStoppedError"
    assert str(LOG) in error["evalue"] and "re-running the notebook" in error["evalue"]
    assert error["traceback"] == [f"LocalStackStoppedError: {error['evalue']}"]


@pytest.mark.parametrize(
    "cell",
    ["import asyncio\nawait asyncio.sleep(120)", "import time\ntime.sleep(120)"],
    ids=["awaiting", "blocking"],
)
def test_running_cell_stops_within_seconds(kernel, stand_in, cell: str) -> None:
    _, client = kernel
    watch(client, stand_in)
    kill_after(stand_in, 1.0)
    reply, errors = run(client, cell)
    # A cell the watcher missed would sleep its 120 s and end "ok"; how fast it stops
    # (~1.5 s) is `make bench`'s.
    assert_stopped_in_one_sentence(reply, errors)
    reply, errors = run(client, "1 + 1")  # a quick cell afterwards still runs
    assert reply["status"] == "ok" and not errors


def test_cell_started_after_the_death_stops_after_its_grace(kernel, stand_in) -> None:
    _, client = kernel
    # A 1 s grace instead of 5 s, the same path; the module's kernel gets its own back after.
    run(client, "import local_stack.client.watch as sw\nsw.LATE_CELL_GRACE_SECONDS = 1.0")
    try:
        watch(client, stand_in)
        stand_in.kill()
        time.sleep(1.5)  # the kernel is idle when the stack dies: nothing to stop yet
        reply, errors = run(client, "import time\ntime.sleep(120)")
        assert_stopped_in_one_sentence(reply, errors)  # else it sleeps its 120 s and ends "ok"
    finally:
        run(client, f"sw.LATE_CELL_GRACE_SECONDS = {LATE_CELL_GRACE_SECONDS}")


def test_stop_button_still_shows_an_interruption(kernel, stand_in) -> None:
    manager, client = kernel
    watch(client, stand_in)
    threading.Timer(1.0, manager.interrupt_kernel).start()
    reply, errors = run(client, "import time\ntime.sleep(120)")
    assert reply["status"] == "error"
    assert [e["traceback"] for e in errors] == [  # not the stack's sentence
        ["KeyboardInterrupt: interrupted at line 2 of the cell"]
    ]


def test_dead_stack_during_a_loop_keeps_its_sentence_and_closes_the_bar(kernel, stand_in):
    _, client = kernel
    watch(client, stand_in)
    seen: list[dict] = []
    kill_after(stand_in, 1.0)
    reply, errors = run(client, loop_cell(blocking=False, interactive=True), on_message=seen.append)
    assert_stopped_in_one_sentence(reply, errors)
    assert bar_styles(seen)[-1] == "danger"  # closed short of its total: red, not running


def test_connect_again_stops_the_old_watch(kernel, stand_in) -> None:
    """`helpers.connect` stops watching (`local_stack.client.attach.stop_watching`) before it
    (re)starts a stack on purpose."""
    _, client = kernel
    watch(client, stand_in)
    run(client, "from local_stack.client.attach import stop_watching\nstop_watching()")
    kill_after(stand_in, 0.5)
    reply, errors = run(client, "import time\ntime.sleep(3)")
    assert reply["status"] == "ok" and not errors
