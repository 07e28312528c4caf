"""One-sentence errors for bad settings and for runs that cannot go on.

A workshop attendee who mistypes a parameter, or whose local stack died, should read one
sentence that says what happened and what to do, not forty lines of traceback. Inside
IPython, errors of these types are shown as that sentence alone; everywhere else they
are ordinary exceptions.

Interruptions are short too. Jupyter's stop button shows as one line: in a training loop
(a `helpers.progress.StepProgress` the cell is using) the line says how many steps were
done and the loop's bar is closed; elsewhere it says at which line of the cell the
interruption came.

A watcher thread (see `helpers.backend.watch_local_stack`) can stop the running cell with
a reason: it interrupts the kernel's main thread, as Jupyter's stop button does, and the
interruption is then shown as the reason's sentence instead. A plain script is stopped the
same way (`raise_reasons_in_script`): the reason is raised in its main thread, and if
nothing catches it, the script ends at once with that one sentence.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
import threading
from typing import Any

from helpers.progress import stop_loop_of_this_cell


class CourseConfigError(ValueError):
    """A setting the course cannot run with; the message says which and what is allowed."""


class CourseRunError(RuntimeError):
    """A run that cannot go on; the message says why and what to do next."""


# An interruption shows up in the cell as KeyboardInterrupt (a cell running plain code)
# or CancelledError (ipykernel cancels a cell that is awaiting something).
_INTERRUPTIONS = (KeyboardInterrupt, asyncio.CancelledError)
_interrupt_reason: CourseRunError | None = None


def interrupt_running_cell(
    reason: CourseRunError, loop: asyncio.AbstractEventLoop | None = None
) -> None:
    """From another thread: stop the cell that is running; it fails with `reason`.

    `loop` is the kernel's event loop. The signal's handler only schedules the cancel of
    an awaiting cell, and does not wake the loop from its wait, so the loop is woken too.
    """
    global _interrupt_reason
    _interrupt_reason = reason
    main_thread = threading.main_thread().ident
    assert main_thread is not None  # it has started: it imported this module
    signal.pthread_kill(main_thread, signal.SIGINT)
    if loop is not None and not loop.is_closed():
        loop.call_soon_threadsafe(lambda: None)


def raise_reasons_in_script() -> bool:
    """Outside IPython: from now on `interrupt_running_cell` raises its reason in the main
    thread, shown as that one sentence if the script lets it end the script; a Ctrl-C still
    does what it did before. False where not possible (only the main thread may install a
    signal handler)."""
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "raises_reasons", False):
        return True

    def raise_reason(signum: int, frame: Any) -> Any:
        global _interrupt_reason
        reason, _interrupt_reason = _interrupt_reason, None
        if reason is not None:
            _raised_reasons.add(id(reason))
            raise reason
        if callable(previous):
            return previous(signum, frame)
        if previous != signal.SIG_IGN:
            raise KeyboardInterrupt

    raise_reason.raises_reasons = True  # type: ignore[attr-defined]
    try:
        signal.signal(signal.SIGINT, raise_reason)
    except ValueError:  # not the main thread
        return False
    previous_hook = sys.excepthook

    def one_sentence(etype: type[BaseException], value: BaseException, tb: Any) -> None:
        if id(value) not in _raised_reasons:
            previous_hook(etype, value, tb)
            return
        print(f"{etype.__name__}: {value}", file=sys.stderr)
        # The script's own `finally` blocks have run. Exit now: the SDKs' threads would
        # hold the interpreter's exit for minutes, waiting on a stack that cannot answer.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)

    sys.excepthook = one_sentence
    return True


# The reasons raised in a script's main thread (ids): shown as their sentence alone.
_raised_reasons: set[int] = set()


def forget_interrupt_reason() -> None:
    """Drop a reason whose interruption never reached a cell (it finished just before)."""
    global _interrupt_reason
    _interrupt_reason = None


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
    global _interrupt_reason
    if issubclass(etype, _INTERRUPTIONS) and not _cell_was_interrupted(etype):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return []
    loop_stopped = stop_loop_of_this_cell()  # a loop this error ended must not look running
    if issubclass(etype, _INTERRUPTIONS):
        reason, _interrupt_reason = _interrupt_reason, None
        value = reason or KeyboardInterrupt(loop_stopped or _where_interrupted(tb))
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


def install_short_errors() -> None:
    """Show the course's errors as one line in a running IPython kernel (no-op elsewhere)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc(
            (CourseConfigError, CourseRunError, *_INTERRUPTIONS), _show_one_sentence
        )
        _wake_loop_on_signals()
