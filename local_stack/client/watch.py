"""Noticing, within a second, that the stack's server died under a kernel or a script, and
within HUNG_SECONDS that it stopped answering.

When the server process is gone, the SDKs do not know it: they retry a refused connection
for about five minutes and then say "Connection error"; a server that is stuck (stopped,
or frozen holding the interpreter lock) leaves them waiting even longer. So a kernel that
uses the stack (`helpers.connect("local")`) runs a thread here that checks the server's pid
twice a second and asks its `/healthz` every second. When the process is gone, or no
`/healthz` has been answered for HUNG_SECONDS, it calls the `stop_cell` the kernel gave it
(with "dead" or "hung"), which stops the running cell with a sentence saying what happened.
`/healthz` is answered by the server's event loop, never queued behind compute, so a
stack that is merely busy (a long training step) still answers it within milliseconds.

A cell that was already running is stopped at once. A cell started after the death gets
a few seconds' grace first, so that re-running the cell that calls `helpers.connect`
reaches it and starts a new stack. A plain script (no IPython) is one long cell: its
`stop_script` is called once, as soon as the stack is found dead or hung, and stops the
script with the same sentence (`watch_local_stack`), where the SDKs would otherwise retry
for minutes.

The cell is stopped as Jupyter's stop button stops it: the kernel's main thread gets SIGINT,
and `notebook_ui.short_errors` shows the interruption as the reason's sentence
(`take_interrupt_reason`). A script's main thread gets the reason raised instead
(`raise_reasons_in_script`).

Kernel side, like `supervisor`: the server never imports it.
"""

from __future__ import annotations

import asyncio
import http.client
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import psutil

POLL_SECONDS = 0.5
PROBE_SECONDS = 1.0  # how often /healthz is asked
PROBE_TIMEOUT_SECONDS = 2.0
# No /healthz answer for this long: the stack is stuck. A busy stack answers in
# milliseconds; this leaves room for a machine loaded far beyond its cores.
HUNG_SECONDS = 12.0
# How long a cell started after the stack died may run before it is stopped too.
LATE_CELL_GRACE_SECONDS = 5.0

Failure = Literal["dead", "hung"]


class StackWatcher:
    """Watches one server process on behalf of one IPython shell, or of a script (`shell`
    None: one cell, running from the start)."""

    def __init__(
        self, pid: int, url: str | None, shell: Any | None, stop_cell: Callable[[Failure], None]
    ) -> None:
        self._pid = pid
        self._url = urlsplit(url) if url else None
        self._shell = shell
        self._stop_cell = stop_cell
        self._process: psutil.Process | None = None
        self._stop = threading.Event()
        self._died_at: float | None = None  # when it was found dead or hung
        self._failure: Failure = "dead"
        self._answered_at = time.monotonic()  # the last /healthz answer
        self._probed_at = 0.0
        self._cell_started_at: float | None = None
        self._stopped_this_cell = False
        if shell is None:
            self._cell_started_at = float("-inf")  # before any failure: stopped at once
        else:
            shell.events.register("pre_run_cell", self._cell_starts)
            shell.events.register("post_run_cell", self._cell_ends)
        self._thread = threading.Thread(target=self._watch, name="local-stack-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the stack is about to be stopped on purpose, or replaced)."""
        self._stop.set()
        if self._thread is not threading.current_thread():  # stop_script may stop watching
            self._thread.join()
        if self._shell is not None:
            self._shell.events.unregister("pre_run_cell", self._cell_starts)
            self._shell.events.unregister("post_run_cell", self._cell_ends)

    def _cell_starts(self, info: Any) -> None:
        self._cell_started_at = time.monotonic()
        self._stopped_this_cell = False

    def _cell_ends(self, result: Any) -> None:
        self._cell_started_at = None

    def _alive(self) -> bool:
        try:
            if self._process is None:  # remembers the start time, so a reused pid is caught
                self._process = psutil.Process(self._pid)
            return self._process.is_running() and self._process.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _answers(self) -> bool:
        """Whether `/healthz` answers 200 within PROBE_TIMEOUT_SECONDS (True without a URL).
        A plain connection to loopback: no proxy applies."""
        if self._url is None:
            return True
        connection = http.client.HTTPConnection(self._url.netloc, timeout=PROBE_TIMEOUT_SECONDS)
        try:
            connection.request("GET", "/healthz")
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def _failing(self) -> Failure | None:
        """ "dead", "hung", or None while the stack is alive and answering."""
        if not self._alive():
            return "dead"
        now = time.monotonic()
        if now - self._probed_at >= PROBE_SECONDS:
            self._probed_at = now
            if self._answers():
                self._answered_at = time.monotonic()
        return "hung" if time.monotonic() - self._answered_at >= HUNG_SECONDS else None

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if self._died_at is None or self._failure == "hung":
                failure = self._failing()
                if failure is None:
                    self._died_at = None  # a stuck stack that answers again is fine
                    continue
                if self._died_at is None or failure != self._failure:
                    self._died_at, self._failure = time.monotonic(), failure
            started = self._cell_started_at
            if started is None or self._stopped_this_cell:
                continue
            if started <= self._died_at or time.monotonic() - started >= LATE_CELL_GRACE_SECONDS:
                self._stopped_this_cell = True
                self._stop_cell(self._failure)


_watcher: StackWatcher | None = None


def watch_from_kernel(
    pid: int,
    stop_cell: Callable[[Failure], None],
    url: str | None = None,
    stop_script: Callable[[Failure], None] | None = None,
) -> None:
    """From this IPython kernel, watch the server `pid` at `url` (replacing any earlier
    watch): once it has died or stopped answering, the watching thread calls
    `stop_cell("dead")` or `stop_cell("hung")` once in each cell that runs. Outside IPython
    (a script) it calls `stop_script` instead, once; without one, a script is not watched."""
    global _watcher
    stop_watching()
    shell = _ipython_shell()
    if shell is not None:
        _watcher = StackWatcher(pid, url, shell, stop_cell)
    elif stop_script is not None:
        _watcher = StackWatcher(pid, url, None, stop_script)


def in_ipython() -> bool:
    """Whether this process is an IPython shell (a Jupyter kernel, say), not a script."""
    return _ipython_shell() is not None


def _ipython_shell() -> Any | None:
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    return get_ipython()


def stop_watching() -> None:
    global _watcher
    if _watcher is not None:
        _watcher.stop()
        _watcher = None


class LocalStackStoppedError(RuntimeError):
    """The local stack's server process is gone, or no longer answers."""


def watch_local_stack(pid: int, log_path: Path, url: str | None = None) -> None:
    """In an IPython kernel, stop the running cell within a second of the server `pid` dying,
    or within HUNG_SECONDS of it no longer answering at `url`, with one sentence: what
    happened, where its log is, and that re-running resumes (the stack keeps its checkpoints
    on disk). A script that called `helpers.connect` from its main thread is stopped the same
    way: the sentence is raised there."""
    stop_watching()  # replaces any earlier watch, and a reason it left
    forget_interrupt_reason()

    def reason(failure: Failure, rerun: str) -> LocalStackStoppedError:
        rerun += " restarts it (a training run resumes after its last completed step)."
        if failure == "dead":
            return LocalStackStoppedError(
                f"The local stack (pid {pid}) stopped; its log is {log_path}, and {rerun}"
            )
        return LocalStackStoppedError(
            f"The local stack (pid {pid}) has not answered {url}/healthz for "
            f"{HUNG_SECONDS:g} s, so it is stuck; its log is {log_path}, and {rerun}"
        )

    try:
        kernel_loop = asyncio.get_running_loop()  # ipykernel runs every cell inside it
    except RuntimeError:
        kernel_loop = None

    def stop_cell(failure: Failure) -> None:
        interrupt_running_cell(reason(failure, "re-running the notebook"), kernel_loop)

    def stop_script(failure: Failure) -> None:
        interrupt_running_cell(reason(failure, "re-running the script"), kernel_loop)

    if in_ipython():
        watch_from_kernel(pid, stop_cell, url)
    elif raise_reasons_in_script():  # False off the main thread: nobody to stop there
        watch_from_kernel(pid, stop_cell, url, stop_script)


# The reason the watcher last stopped the running cell for, until the cell shows it.
_interrupt_reason: LocalStackStoppedError | None = None
# The reasons raised in a script's main thread (ids): shown as their sentence alone.
_raised_reasons: set[int] = set()


def interrupt_running_cell(
    reason: LocalStackStoppedError, loop: asyncio.AbstractEventLoop | None = None
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


def take_interrupt_reason() -> LocalStackStoppedError | None:
    """The reason the running cell was interrupted for, once; None for a plain interrupt."""
    global _interrupt_reason
    reason, _interrupt_reason = _interrupt_reason, None
    return reason


def forget_interrupt_reason() -> None:
    """Drop a reason whose interruption never reached a cell (it finished just before)."""
    take_interrupt_reason()


def raise_reasons_in_script() -> bool:
    """Outside IPython: from now on `interrupt_running_cell` raises its reason in the main
    thread, shown as that one sentence if the script lets it end the script; a Ctrl-C still
    does what it did before. False where not possible (only the main thread may install a
    signal handler)."""
    previous = signal.getsignal(signal.SIGINT)
    if getattr(previous, "raises_reasons", False):
        return True

    def raise_reason(signum: int, frame: Any) -> Any:
        if (reason := take_interrupt_reason()) is not None:
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
