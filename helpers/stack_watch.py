"""Noticing, within a second, that the local stack died under a notebook.

When the server process is gone, the SDKs do not know it: they retry a refused connection
for about five minutes and then say "Connection error". So `helpers.connect("local")`
starts a thread here that checks the server's pid twice a second. When the process is
gone it stops the running cell, which fails with one sentence: the stack stopped, where
its log is, and that re-running resumes (the stack keeps its checkpoints on disk, and
notebook 04 resumes after its last completed step).

A cell that was already running is stopped at once. A cell started after the death gets
a few seconds' grace first, so that re-running the cell that calls `helpers.connect`
reaches it and starts a new stack. Only IPython kernels are watched: elsewhere nobody
is waiting on a cell, and interrupting a script's main thread would be rude.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from helpers.errors import CourseRunError, forget_interrupt_reason, interrupt_running_cell

POLL_SECONDS = 0.5
# How long a cell started after the stack died may run before it is stopped too.
LATE_CELL_GRACE_SECONDS = 5.0


class LocalStackStoppedError(CourseRunError):
    """The local stack's server process is gone."""


def stopped_message(pid: int, log_path: Path) -> str:
    return (
        f"The local stack (pid {pid}) stopped; its log is {log_path}, and re-running the "
        "notebook restarts it (a training run resumes after its last completed step)."
    )


class StackWatcher:
    """Watches one server process on behalf of one IPython shell."""

    def __init__(self, pid: int, log_path: Path, shell: Any) -> None:
        self.reason = LocalStackStoppedError(stopped_message(pid, log_path))
        self._pid = pid
        self._shell = shell
        self._loop = _running_loop()
        self._process: psutil.Process | None = None
        self._stop = threading.Event()
        self._died_at: float | None = None
        self._cell_started_at: float | None = None
        self._interrupted_this_cell = False
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
        forget_interrupt_reason()

    def _cell_starts(self, info: Any) -> None:
        self._cell_started_at = time.monotonic()
        self._interrupted_this_cell = False

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
            if started is None or self._interrupted_this_cell:
                continue
            if started <= self._died_at or time.monotonic() - started >= LATE_CELL_GRACE_SECONDS:
                self._interrupted_this_cell = True
                interrupt_running_cell(self.reason, self._loop)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    """The kernel's event loop (ipykernel runs every cell, plain or awaiting, inside it)."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


_watcher: StackWatcher | None = None


def watch_local_stack(pid: int, log_path: Path) -> None:
    """Watch the server `pid` from this IPython kernel; replaces any earlier watch."""
    global _watcher
    stop_watching()
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        _watcher = StackWatcher(pid, log_path, shell)


def stop_watching() -> None:
    global _watcher
    if _watcher is not None:
        _watcher.stop()
        _watcher = None
