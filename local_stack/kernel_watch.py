"""Noticing, within a second, that the stack's server died under an IPython kernel.

When the server process is gone, the SDKs do not know it: they retry a refused connection
for about five minutes and then say "Connection error". So a kernel that uses the stack
(`helpers.connect("local")`) runs a thread here that checks the server's pid twice a
second. When the process is gone, it calls the `stop_cell` the kernel gave it, which stops
the running cell with a sentence saying what happened.

A cell that was already running is stopped at once. A cell started after the death gets
a few seconds' grace first, so that re-running the cell that calls `helpers.connect`
reaches it and starts a new stack. Only IPython kernels are watched: elsewhere nobody
is waiting on a cell, and interrupting a script's main thread would be rude.

Client side, like `supervisor`: the server never imports it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

POLL_SECONDS = 0.5
# How long a cell started after the stack died may run before it is stopped too.
LATE_CELL_GRACE_SECONDS = 5.0


class StackWatcher:
    """Watches one server process on behalf of one IPython shell."""

    def __init__(self, pid: int, shell: Any, stop_cell: Callable[[], None]) -> None:
        self._pid = pid
        self._shell = shell
        self._stop_cell = stop_cell
        self._process: psutil.Process | None = None
        self._stop = threading.Event()
        self._died_at: float | None = None
        self._cell_started_at: float | None = None
        self._stopped_this_cell = False
        shell.events.register("pre_run_cell", self._cell_starts)
        shell.events.register("post_run_cell", self._cell_ends)
        self._thread = threading.Thread(target=self._watch, name="local-stack-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (the stack is about to be stopped on purpose, or replaced)."""
        self._stop.set()
        self._thread.join()
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

    def _watch(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            if self._died_at is None:
                if self._alive():
                    continue
                self._died_at = time.monotonic()
            started = self._cell_started_at
            if started is None or self._stopped_this_cell:
                continue
            if started <= self._died_at or time.monotonic() - started >= LATE_CELL_GRACE_SECONDS:
                self._stopped_this_cell = True
                self._stop_cell()


_watcher: StackWatcher | None = None


def watch_from_kernel(pid: int, stop_cell: Callable[[], None]) -> None:
    """From this IPython kernel, watch the server `pid` (replacing any earlier watch): once
    it has died, the watching thread calls `stop_cell` once in each cell that runs."""
    global _watcher
    stop_watching()
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        _watcher = StackWatcher(pid, shell, stop_cell)


def stop_watching() -> None:
    global _watcher
    if _watcher is not None:
        _watcher.stop()
        _watcher = None
