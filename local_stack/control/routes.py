"""HTTP for the control plane: `GET/POST/DELETE /local/config` and `GET /local/stats`.

Mounted as its own sub-app at `/local`. It answers only with a Sail key (the knobs change
what Sail and Tinker answer), and a POST must be `application/json`, which a cross-origin
web page cannot send without the browser asking first. Each client sees and changes its own
settings (`local_stack.control.knobs.ClientKnobs`); a client's go once its process has left
the stack (`local_stack.departures`).
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from local_stack.config import SAIL_API_KEY, SAIL_KEY_PREFIX
from local_stack.control.knobs import ClientKnobs
from local_stack.http import CLIENT, ApiError, ServiceStyle, bearer_client, read_json, service_app

MAX_BODY_BYTES = 64 * 1024

KNOBS = web.AppKey("knobs", ClientKnobs)
STATS = web.AppKey[Callable[[], dict]]("stats")

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


def control_app(knobs: ClientKnobs, stats: Callable[[], dict]) -> web.Application:
    """The control sub-app over `knobs`; `stats()` gives the counters `/local/stats` shows."""
    app = service_app(CONTROL_STYLE)
    app[KNOBS] = knobs
    app[STATS] = stats
    app.router.add_get("/config", get_config)
    app.router.add_post("/config", set_config)
    app.router.add_delete("/config", reset_config)
    app.router.add_get("/stats", get_stats)
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
