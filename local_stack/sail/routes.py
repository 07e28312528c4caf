"""HTTP for the Sail emulation: responses, and the files and named LoRAs they can sample with.

    POST /v1/responses, GET /v1/responses/{id}             sampling (`sail.SailTokenCompleter`)
    POST /v1/files, GET /v1/files[/{id}], DELETE ...{id}  adapter files (`files`)
    POST /v1/loras, GET /v1/loras[/{name}], DELETE ...    named LoRAs (`loras`)

A sub-app mounted at `/v1`. Its middleware (`local_stack.http`) checks the Bearer key and
turns every `ApiError` into Sail's error body; the handlers only read the body, hand it to
the parsing layer and the service, and write the answer. Two injected faults are HTTP
faults, so they are applied here: `http500` and `malformed` (a truncated JSON body).
Responses, files and LoRAs belong to the client whose key created them (`files`, `loras`);
to any other client they answer 404.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from local_stack.config import SAIL_API_KEY, SAIL_KEY_PREFIX
from local_stack.control.knobs import ClientKnobs
from local_stack.engine.compute import run_compute
from local_stack.http import CLIENT, ApiError, ServiceStyle, bearer_client, read_json, service_app
from local_stack.lanes import Lanes
from local_stack.sail.files import read_upload
from local_stack.sail.loras import parse_create_body
from local_stack.sail.requests import parse_sampling_request
from local_stack.sail.service import SailService
from local_stack.tinker.routes import ARCHIVE_ROUTE
from local_stack.tinker.routes import PUBLIC_URL as TINKER_PUBLIC_URL

# A create body is a prompt of at most a few hundred ids and some metadata.
MAX_BODY_BYTES = 1024**2
MAX_LORA_BODY_BYTES = 64 * 1024  # a name, model ids and two file ids

SERVICE = web.AppKey("sail_service", SailService)
KNOBS = web.AppKey("sail_knobs", ClientKnobs)
SAIL_LANES = web.AppKey("sail_lanes", Lanes)
EXPIRE_CHECKPOINT = web.AppKey[Callable[[str], None]]("expire_checkpoint")


def _error_body(error: ApiError) -> dict:
    kind = "authentication_error" if error.status == 401 else "invalid_request_error"
    if error.status == 429:
        kind = "rate_limit_error"
    if error.status >= 500:
        kind = "server_error"
    code = "invalid_api_key" if error.status == 401 else error.code
    return {"error": {"message": str(error), "type": kind, "param": error.param, "code": code}}


SAIL_STYLE = ServiceStyle(
    name="sail",
    client_of=bearer_client,
    unauthorized=ApiError(
        f"invalid or missing API key (the local stack accepts {SAIL_KEY_PREFIX}<client> keys, "
        f"<client> 1-32 lowercase letters or digits, e.g. SAIL_API_KEY={SAIL_API_KEY})",
        status=401,
    ),
    error_body=_error_body,
)


def sail_app(
    knobs: ClientKnobs,
    lanes: Lanes | None = None,
    expire_checkpoint: Callable[[str], None] = lambda url: None,
) -> web.Application:
    """The Sail sub-app; its service (and the model) loads when the app starts. `lanes`
    (every name its own if not given) says which clients share turns and quotas;
    `expire_checkpoint(archive_url)` expires the Tinker checkpoint behind an archive URL
    (for the `checkpoint_expired` fault)."""
    app = service_app(SAIL_STYLE)
    app[KNOBS] = knobs
    app[SAIL_LANES] = lanes or Lanes()
    app[EXPIRE_CHECKPOINT] = expire_checkpoint
    app.router.add_post("/responses", create_response)
    app.router.add_get("/responses/{id}", retrieve_response)
    app.router.add_post("/files", upload_file)
    _add_store_routes(app, "/files", lambda service: service.files)
    app.router.add_post("/loras", create_lora)
    _add_store_routes(app, "/loras", lambda service: service.loras)
    app.on_startup.append(_start_service)
    app.on_cleanup.append(_stop_service)
    return app


async def _start_service(app: web.Application) -> None:
    app[SERVICE] = await run_compute(
        SailService, app[KNOBS], app[SAIL_LANES], app[EXPIRE_CHECKPOINT]
    )


async def _stop_service(app: web.Application) -> None:
    await app[SERVICE].close()


async def create_response(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    body = await read_json(request, max_bytes=MAX_BODY_BYTES)
    parsed = parse_sampling_request(
        body, service.vocabs, client=request[CLIENT], archive_prefix=_archive_prefix(request)
    )
    stored = await service.create(parsed, request[CLIENT])
    if stored.request.background:
        return web.json_response(service.queued_body(stored))
    return web.json_response(await service.wait_until_done(stored))


def _archive_prefix(request: web.Request) -> str | None:
    """Where this stack's Tinker serves adapter archives (None if it is not mounted)."""
    public_url = request.config_dict.get(TINKER_PUBLIC_URL)
    return None if public_url is None else f"{public_url}{ARCHIVE_ROUTE}/"


async def retrieve_response(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    stored = service.find(request.match_info["id"])
    if stored is None or stored.request.client != request[CLIENT]:  # another's is not found
        raise ApiError("no response with that id", status=404)
    body = await service.wait(stored)
    if body["status"] != "in_progress" and stored.fault == "http500":
        raise ApiError("injected fault: internal server error", status=500)
    if body["status"] != "in_progress" and stored.fault == "malformed":
        return web.Response(text=json.dumps(body)[:40], content_type="application/json")
    return web.json_response(body)


async def upload_file(request: web.Request) -> web.Response:
    filename, purpose, data = await read_upload(request)
    stored = request.app[SERVICE].files.add(request[CLIENT], filename, purpose, data)
    return web.json_response(stored.body())


async def create_lora(request: web.Request) -> web.Response:
    loras = request.app[SERVICE].loras
    body = await read_json(request, max_bytes=MAX_LORA_BODY_BYTES, json_type_only=True)
    spec = parse_create_body(body, loras.known_models)
    return web.json_response(loras.create(request[CLIENT], spec).body())


class Store(Protocol):
    """What files and named LoRAs both offer, each client its own: list them, get one by id
    (or name), delete one."""

    def listing(self, owner: str) -> dict[str, Any]: ...
    # An item with `.body()`; 404 `ApiError` if the owner has none by that id.
    def get(self, owner: str, ref: str) -> Any: ...
    def delete(self, owner: str, ref: str) -> dict[str, Any]: ...


def _add_store_routes(
    app: web.Application, path: str, store_of: Callable[[SailService], Store]
) -> None:
    """GET `path`, and GET and DELETE `path/{ref}`, on the service's store `store_of` picks."""

    def store(request: web.Request) -> Store:
        return store_of(request.app[SERVICE])

    async def listing(request: web.Request) -> web.Response:
        return web.json_response(store(request).listing(request[CLIENT]))

    async def retrieve(request: web.Request) -> web.Response:
        item = store(request).get(request[CLIENT], request.match_info["ref"])
        return web.json_response(item.body())

    async def delete(request: web.Request) -> web.Response:
        return web.json_response(store(request).delete(request[CLIENT], request.match_info["ref"]))

    app.router.add_get(path, listing)
    app.router.add_get(f"{path}/{{ref}}", retrieve)
    app.router.add_delete(f"{path}/{{ref}}", delete)
