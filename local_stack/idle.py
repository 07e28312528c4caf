"""The local stack stops by itself once nobody needs it.

Nobody needs it when no process is registered as its client (a kernel is, from
`connect("local")` until it exits) and no request has arrived for `config.idle_seconds()`.
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


def install(app: web.Application, storage_dir: Path) -> None:
    """Time every request, and exit (via SIGTERM, the graceful path) once idle."""
    clock = IdleClock()
    app.middlewares.append(clock.middleware)

    async def start(app: web.Application) -> None:
        app["idle_watch"] = asyncio.ensure_future(_watch(clock, storage_dir))

    async def stop(app: web.Application) -> None:
        app["idle_watch"].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app["idle_watch"]
        registry.remove_record(storage_dir, os.getpid())

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


async def _watch(clock: IdleClock, storage_dir: Path) -> None:
    limit = config.idle_seconds()
    period = min(MAX_CHECK_SECONDS, max(0.2, limit / 4))
    while True:
        await asyncio.sleep(period)
        if clock.idle_for() < limit or registry.live_clients(storage_dir):
            continue
        with registry.locked(storage_dir, timeout=0) as held:
            if not held or clock.idle_for() < limit:
                continue  # someone is finding or starting the stack right now
            registry.remove_record(storage_dir, os.getpid())
        print(
            f"local stack: no client and no request for {limit / 60:g} min, stopping",
            file=sys.stderr,
            flush=True,
        )
        os.kill(os.getpid(), signal.SIGTERM)
        return
