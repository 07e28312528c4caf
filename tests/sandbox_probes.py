"""What the sandbox tests share: the task, and a way to find a test's processes on the machine.

Every process a test starts in a sandbox carries a unique marker (in its command line or
its environment), so a psutil scan of the whole machine can prove none survives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

TASK_DIR = Path(__file__).resolve().parents[1] / "tasks" / "sum_numbers"
ENV_DIR = TASK_DIR / "environment"
MARKER_VARIABLE = "SANDBOX_TEST_MARKER"


def run(coroutine: Awaitable[Any]) -> Any:
    return asyncio.run(coroutine)  # type: ignore[arg-type]


def create_and_run_pwd(factory: Callable[..., Awaitable[Any]]) -> str:
    """Create a sandbox with `factory`, run `pwd` in it, clean up; what `pwd` printed.

    Here rather than in test_sandbox.py: a spawned process that runs it imports its module,
    and this one imports in a fraction of a second (test_sandbox.py's imports take seconds)."""

    async def use() -> str:
        sandbox = await factory(ENV_DIR, 60)
        try:
            return (await sandbox.run_command("pwd")).stdout.strip()
        finally:
            await sandbox.cleanup()

    return asyncio.run(use())


def processes_with(marker: str) -> list[psutil.Process]:
    """Every live process on the machine whose command line or environment holds `marker`."""
    found = []
    for process in psutil.process_iter():
        try:
            if (
                marker in " ".join(process.cmdline())
                or process.environ().get(MARKER_VARIABLE) == marker
            ):
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found
