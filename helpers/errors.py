"""One-sentence errors for bad settings and for runs that cannot go on.

A workshop attendee who mistypes a parameter, or whose local stack died, should read one
sentence that says what happened and what to do, not forty lines of traceback. Inside
IPython, errors of these types are shown as that sentence alone; everywhere else they
are ordinary exceptions.

A watcher thread (see `helpers.stack_watch`) can stop the running cell with a reason:
it interrupts the kernel's main thread, as Jupyter's stop button does, and the
interruption is then shown as the reason's sentence instead of a traceback.
"""

from __future__ import annotations

import asyncio
import signal
import threading
from typing import Any


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
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    if loop is not None and not loop.is_closed():
        loop.call_soon_threadsafe(lambda: None)


def forget_interrupt_reason() -> None:
    """Drop a reason whose interruption never reached a cell (it finished just before)."""
    global _interrupt_reason
    _interrupt_reason = None


def _show_one_sentence(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset=None):
    global _interrupt_reason
    if issubclass(etype, _INTERRUPTIONS):
        reason, _interrupt_reason = _interrupt_reason, None
        if reason is None:  # the stop button: the usual traceback
            shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
            return []
        etype, value = type(reason), reason
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)  # publishes the error like any other
    return stb


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
