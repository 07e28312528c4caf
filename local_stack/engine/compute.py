"""One worker thread for all model compute in the local stack.

Sampling and training share two CPU cores; running them one at a time on a single
thread keeps torch from oversubscribing the cores and keeps the event loop free to
answer HTTP requests (polls, heartbeats) while a batch runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-compute")


async def run_compute(fn: Callable[..., T], *args: object) -> T:
    """Run `fn(*args)` on the compute thread and await its result."""
    return await asyncio.get_running_loop().run_in_executor(_EXECUTOR, fn, *args)
