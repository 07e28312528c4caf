"""HTTP for the control plane: `GET/POST /local/config` and `GET /local/stats`.

Mounted as its own sub-app at `/local`. It answers only with a Sail key (the knobs change
what Sail and Tinker answer), and a POST must be `application/json`, which a cross-origin
web page cannot send without the browser asking first.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

from local_stack.config import SAIL_API_KEY, SAIL_KEY_PREFIX
from local_stack.control.knobs import Knobs
from local_stack.http import ApiError, ServiceStyle, bearer_client, read_json, service_app

MAX_BODY_BYTES = 64 * 1024

KNOBS = web.AppKey("knobs", Knobs)
STATS = web.AppKey("stats", Callable[[], dict])

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


def control_app(knobs: Knobs, stats: Callable[[], dict]) -> web.Application:
    """The control sub-app over `knobs`; `stats()` gives the counters `/local/stats` shows."""
    app = service_app(CONTROL_STYLE)
    app[KNOBS] = knobs
    app[STATS] = stats
    app.router.add_get("/config", get_config)
    app.router.add_post("/config", set_config)
    app.router.add_get("/stats", get_stats)
    return app


async def get_config(request: web.Request) -> web.Response:
    return web.json_response(request.app[KNOBS].as_dict())


async def set_config(request: web.Request) -> web.Response:
    """Change some knobs, all or none; setting `seed` restarts every random stream."""
    changes = await read_json(request, max_bytes=MAX_BODY_BYTES, json_type_only=True)
    request.app[KNOBS].update(changes)
    return web.json_response(request.app[KNOBS].as_dict())


async def get_stats(request: web.Request) -> web.Response:
    """Counters (Sail's batcher), so tests and benchmarks can see requests being batched."""
    return web.json_response(request.app[STATS]())
