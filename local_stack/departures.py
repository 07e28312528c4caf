"""Releasing what a client held once its process has left the stack.

A client is a process that registered itself in the storage dir's `clients/` (a kernel or
a script, from `connect("local")` until it exits; see `local_stack.registry`). It has left
when its entry is gone: it exited and removed it, it died and the registry found its pid
dead, or someone deleted the file. Every DEPARTED_CHECK_SECONDS the stack releases what each
departed client held in memory: its settings, LoRAs, files, training clients (weights and
optimizer state), sessions, futures and stored responses. Nobody can ask for them again:
a client's name is random per process (`config.process_client`) and dies with it.

What stays: checkpoints and run records on disk. A later kernel resumes from the state a
dead one saved (notebook 04 after a crash), and notebook 09 ships the adapter 04's kernel
trained, so they are not the departed client's alone; their TTLs and per-client caps bound
them instead. A name that never registered (a shell pointed at the stack by hand, or a
made-up key) never departs: its resources are bounded by the per-client caps only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from local_stack import registry

logger = logging.getLogger(__name__)

DEPARTED_CHECK_SECONDS = 5.0


def install(app: web.Application, storage_dir: Path, release: Callable[[str], None]) -> None:
    """While `app` runs, call `release(client)` once for each client that leaves."""

    async def start(app: web.Application) -> None:
        app["departures"] = asyncio.ensure_future(_watch(storage_dir, release))

    async def stop(app: web.Application) -> None:
        app["departures"].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await app["departures"]

    app.on_startup.append(start)
    app.on_cleanup.append(stop)


def release_departed(storage_dir: Path, seen: set[str], release: Callable[[str], None]) -> set[str]:
    """Release the clients that left since `seen` were present, and those marked departed;
    returns the clients present now (the next call's `seen`)."""
    present = registry.live_client_names(storage_dir)  # marks the dead ones departed
    marked = registry.departed_clients(storage_dir)
    for client in sorted((seen | marked) - present):
        try:
            release(client)
        except Exception:  # one client's release must not stop the others'
            logger.exception("could not release what client %s held", client)
    registry.forget_departed(storage_dir, marked)
    return present


async def _watch(storage_dir: Path, release: Callable[[str], None]) -> None:
    seen: set[str] = set()
    while True:
        await asyncio.sleep(DEPARTED_CHECK_SECONDS)
        try:
            seen = release_departed(storage_dir, seen, release)
        except OSError:  # the registry is unreadable for now: release nothing
            logger.exception("could not read the stack's clients")
