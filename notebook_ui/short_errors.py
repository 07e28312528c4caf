"""One sentence in IPython, not forty lines of traceback, for interruptions and for errors of
the types a package hands to `install_short_errors` (the course hands it its bad settings, runs
that cannot go on and cloud runs over their budget: `helpers.errors`).

The sentence says what happened and what to do; elsewhere they are ordinary exceptions. An
interrupted training loop says how many steps were done (and its bar closes); another
interrupted cell names the line it stopped at; a cell the local stack's watcher stopped
(`local_stack.client.watch`) shows the watcher's sentence.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import threading
from typing import Any

from notebook_ui.progress import stop_loop_of_this_cell

# An interruption shows up in the cell as KeyboardInterrupt (a cell running plain code)
# or CancelledError (ipykernel cancels a cell that is awaiting something).
_INTERRUPTIONS = (KeyboardInterrupt, asyncio.CancelledError)


def _stack_stopped_reason() -> BaseException | None:
    """Why the local stack's watcher interrupted the cell, if it did (a kernel that never
    loaded the stack has no watcher)."""
    watch = sys.modules.get("local_stack.client.watch")
    return None if watch is None else watch.take_interrupt_reason()


def _cell_was_interrupted(etype: type) -> bool:
    """Whether an interruption type came from an interrupt, not from the cell's own code.

    A CancelledError also reaches the cell when its code awaits a task that something
    else cancelled; only when ipykernel cancelled the cell's own task was it interrupted.
    """
    if issubclass(etype, KeyboardInterrupt):
        return True
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no event loop running: not an ipykernel cell
        return False
    return task is not None and task.cancelling() > 0


def _where_interrupted(tb: Any) -> str:
    # `tb` starts in IPython's run_code; the next entry is the cell itself.
    cell = tb.tb_next if tb is not None else None
    return f"interrupted at line {cell.tb_lineno} of the cell" if cell else "interrupted"


def _show_one_sentence(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset=None):
    if issubclass(etype, _INTERRUPTIONS) and not _cell_was_interrupted(etype):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return []
    loop_stopped = stop_loop_of_this_cell()  # a loop this error ended must not look running
    if issubclass(etype, _INTERRUPTIONS):
        value = _stack_stopped_reason() or KeyboardInterrupt(loop_stopped or _where_interrupted(tb))
        etype = type(value)
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)  # publishes the error like any other
    return stb


# A socket pair whose writing end is the signal wakeup fd (see `_wake_loop_on_signals`).
_signal_wakeup: tuple[socket.socket, socket.socket] | None = None


def _wake_loop_on_signals() -> None:
    """Let the stop button reach a cell that awaits something quiet, like a long sleep.

    ipykernel's SIGINT handler schedules the cancel of an awaiting cell on the event loop
    without waking it, so the cancel waited for the loop's next event (minutes, for a
    cell awaiting a slow request). With a signal wakeup fd, every signal is an event.
    """
    global _signal_wakeup
    if _signal_wakeup is not None or threading.current_thread() is not threading.main_thread():
        return  # already done, or not possible (only the main thread may set the wakeup fd)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a terminal IPython: no loop to wake
        return
    reader, writer = socket.socketpair()
    for end in (reader, writer):
        end.setblocking(False)
    previous = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    if previous != -1:  # asyncio's own signal handling already wakes a loop on signals
        signal.set_wakeup_fd(previous)
        reader.close()
        writer.close()
        return
    loop.add_reader(reader.fileno(), reader.recv, 4096)  # drain: waking was the point
    _signal_wakeup = (reader, writer)


def install_short_errors(shown: tuple[type[BaseException], ...]) -> None:
    """Show errors of the types `shown`, and interruptions, as one line in a running IPython
    kernel (no-op elsewhere)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((*shown, *_INTERRUPTIONS), _show_one_sentence)
        _wake_loop_on_signals()
