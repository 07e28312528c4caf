"""The local stack stops by itself once nobody needs it.

Nobody needs it when no process is registered as its client (a kernel is, from
`connect("local")` until it exits), no work is queued or running (a background response
counts until it is done), and no request has arrived or work finished for
`config.idle_seconds()`, so a client has that long to collect a result.
So a kernel left open over lunch keeps its stack, and closing Jupyter frees the stack's
memory half an hour later. The decision is taken under the storage dir's lock, so a kernel
that has just found the stack healthy (a request, under the same lock) is never left with
a stack that is about to exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from local_stack import config, registry

MAX_CHECK_SECONDS = 30.0


class IdleClock:
    """When the last request ended, and whether one is running now."""

    def __init__(self) -> None:
        self.last_request = time.monotonic()
        self.in_flight = 0

    def idle_for(self) -> float:
        return 0.0 if self.in_flight else time.monotonic() - self.last_request

    @web.middleware
    async def middleware(self, request: web.Request, handler) -> web.StreamResponse:
        self.in_flight += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1
            self.last_request = time.monotonic()


def _has_clients(storage_dir: Path) -> bool:
    """Whether a process uses the stack; an unreadable registry counts as yes (the stack
    stays, and says why in its log), never as a crashed watch that stops idling for good."""
    try:
        return bool(registry.live_clients(storage_dir))
    except OSError as error:
        print(f"local stack: cannot read its clients ({error})", file=sys.stderr, flush=True)
        return True


def install(app: web.Application, storage_dir: Path, busy: Callable[[], bool]) -> None:
    """Time every request, and exit (via SIGTERM, the graceful path) once idle; `busy()`
    says whether work is still queued or running."""
    clock = IdleClock()
    app.middlewares.append(clock.middleware)

    async def start(app: web.Application) -> None:
        app["idle_watch"] = asyncio.ensure_future(_watch(clock, storage_dir, busy))

    async def stop(app: web.Application) -> None:
        app["idle_watch"].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app["idle_watch"]
        registry.remove_record(storage_dir, os.getpid())

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


async def _watch(clock: IdleClock, storage_dir: Path, busy: Callable[[], bool]) -> None:
    limit = config.idle_seconds()
    period = min(MAX_CHECK_SECONDS, max(0.2, limit / 4))
    while True:
        await asyncio.sleep(period)
        if busy():
            clock.last_request = time.monotonic()  # idle only from when the work is done
        if clock.idle_for() < limit or _has_clients(storage_dir):
            continue
        with registry.locked(storage_dir, timeout=0) as held:
            if not held or clock.idle_for() < limit or busy():
                continue  # someone is finding or starting the stack right now
            registry.remove_record(storage_dir, os.getpid())
        print(
            f"local stack: no client and no request for {limit / 60:g} min, stopping",
            file=sys.stderr,
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGTERM)
        return
