"""HTTP for the control plane: `GET/POST/DELETE /local/config` and `GET /local/stats`.

Mounted as its own sub-app at `/local`. It answers only with a Sail key (the knobs change
what Sail and Tinker answer), and a POST must be `application/json`, which a cross-origin
web page cannot send without the browser asking first. Each client sees and changes its own
settings (`local_stack.control.knobs.ClientKnobs`); a client's go once its process has left
the stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from local_stack import registry
from local_stack.config import SAIL_API_KEY, SAIL_KEY_PREFIX
from local_stack.control.knobs import ClientKnobs
from local_stack.http import CLIENT, ApiError, ServiceStyle, bearer_client, read_json, service_app

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024
DEPARTED_CHECK_SECONDS = 5.0  # how often the settings of clients that left are forgotten

KNOBS = web.AppKey("knobs", ClientKnobs)
STATS = web.AppKey[Callable[[], dict]]("stats")
STORAGE = web.AppKey("control_storage_dir", Path)

CONTROL_STYLE = ServiceStyle(
    name="control",
    client_of=bearer_client,
    unauthorized=ApiError(
        f"the control routes need 'Bearer {SAIL_KEY_PREFIX}<client>', e.g. 'Bearer {SAIL_API_KEY}'",
        status=401,
    ),
    error_body=lambda error: {"error": {"message": str(error), "status": error.status}},
    client_errors=((ValueError, 400),),  # knob values out of range
)


def control_app(
    knobs: ClientKnobs, stats: Callable[[], dict], storage_dir: Path
) -> web.Application:
    """The control sub-app over `knobs`; `stats()` gives the counters `/local/stats` shows.
    `storage_dir`'s registry says which clients' processes still use the stack."""
    app = service_app(CONTROL_STYLE)
    app[KNOBS] = knobs
    app[STATS] = stats
    app[STORAGE] = storage_dir
    app.router.add_get("/config", get_config)
    app.router.add_post("/config", set_config)
    app.router.add_delete("/config", reset_config)
    app.router.add_get("/stats", get_stats)
    app.cleanup_ctx.append(_forgetting_departed_clients)
    return app


async def get_config(request: web.Request) -> web.Response:
    """The settings the calling client's requests get."""
    return web.json_response(request.app[KNOBS].of(request[CLIENT]).as_dict())


async def set_config(request: web.Request) -> web.Response:
    """Change some of the caller's knobs, all or none; `seed` restarts every random stream."""
    changes = await read_json(request, max_bytes=MAX_BODY_BYTES, json_type_only=True)
    request.app[KNOBS].update(request[CLIENT], changes)
    return await get_config(request)


async def reset_config(request: web.Request) -> web.Response:
    """Back to the stack's defaults (its start-up settings) for the caller."""
    request.app[KNOBS].reset(request[CLIENT])
    return await get_config(request)


async def get_stats(request: web.Request) -> web.Response:
    """Counters (Sail's batcher), so tests and benchmarks can see requests being batched."""
    return web.json_response(request.app[STATS]())


async def _forgetting_departed_clients(app: web.Application):
    """While the stack runs, forget the settings of each client whose process was seen in
    the registry and has left it (exited, or died unannounced)."""
    task = asyncio.ensure_future(_forget_departed(app[KNOBS], app[STORAGE]))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _forget_departed(knobs: ClientKnobs, storage_dir: Path) -> None:
    seen: set[str] = set()
    while True:
        await asyncio.sleep(DEPARTED_CHECK_SECONDS)
        try:
            present = registry.live_client_names(storage_dir)
        except OSError:  # the registry is unreadable for now: forget nothing
            logger.exception("could not read the stack's clients")
            continue
        for client in seen - present:
            knobs.reset(client)
        seen = present
