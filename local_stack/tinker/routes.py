"""HTTP routes of the loopback Tinker service: what tinker 0.35's ServiceClient, TrainingClient
and RestClient call on the course's path. Handlers parse (`requests`), call the service
(`service`) and encode its answer (JSON, or protobuf through `wire`); nothing else.

The wire contract, as the SDK's source defines it:
- Every `/api/v1` request carries `X-API-Key`, a `tml-local-<client>` key (401 else).
  The sub-app's middleware (`local_stack.http`) checks it and maps errors to `{"detail"}`.
- Training requests answer a future, `{request_id, model_id}`, and the SDK then polls
  `/api/v1/retrieve_future`. Polls are held open until the result exists (long polling),
  so a result reaches the client as soon as it is computed, without busy polling.
- `forward_backward` arrives as protobuf and its result leaves as protobuf (`tinker/proto`).
- Errors: input that cannot work answers 4xx with a JSON body when submitted, which the SDK
  raises at once (BadRequestError, NotFoundError, AuthenticationError). The SDK retries 408,
  409, 429, 5xx and bodiless 400s for minutes, so none of those is used for an error a retry
  cannot fix. A failure while computing becomes a failed future: RequestFailedError.
- The adapter archive Sail downloads (`/tinker/archives/...`) stands in for a signed URL:
  it needs no key, and a link to a deleted or expired checkpoint answers 404.
- Each request acts as the client its key names (`request[CLIENT]`): what another client
  created answers 404 (`state` says what is shared).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from local_stack.config import TINKER_API_KEY, TINKER_KEY_PREFIX, client_from_key
from local_stack.control.knobs import ClientKnobs, Knobs
from local_stack.engine.checkpoints import CheckpointNotFound, CheckpointStore
from local_stack.engine.trainer import ForwardBackwardResult
from local_stack.http import (
    CLIENT,
    ApiError,
    Handler,
    ServiceStyle,
    decode,
    lane,
    no_key,
    read_body,
    service_app,
)
from local_stack.lanes import Lanes
from local_stack.tinker import requests, wire
from local_stack.tinker.futures import Job
from local_stack.tinker.requests import Queued
from local_stack.tinker.service import StepPart, TinkerService
from local_stack.tinker.state import SessionFinished, TrainingModel, UnknownId

API_PREFIX = "/api/v1"
ARCHIVE_ROUTE = "/tinker/archives"
# Held-open polls answer `try_again` after this long; the SDK's poll timeout is 45 s.
LONG_POLL_SECONDS = 20.0
# Body caps. The SDK cuts a forward_backward into chunks of at most 1024 datums and about
# 5 MB by its own estimate (10 bytes a token); with 256-token datums and their loss inputs
# that is under 10 MB. Every other request is a small JSON or protobuf message.
MAX_FORWARD_BACKWARD_BYTES = 32 * 1024**2
MAX_BODY_BYTES = 1024**2

T = TypeVar("T")

SERVICE = web.AppKey("tinker_service", TinkerService)
PUBLIC_URL = web.AppKey("tinker_public_url", str)

API_STYLE = ServiceStyle(
    name="Tinker",
    client_of=lambda request: client_from_key(
        request.headers.get("X-API-Key", ""), TINKER_KEY_PREFIX
    ),
    unauthorized=ApiError(
        f"invalid Tinker API key: the local stack accepts {TINKER_KEY_PREFIX}<client> keys "
        f"(<client>: 1-32 lowercase letters or digits), e.g. {TINKER_API_KEY!r}",
        status=401,
    ),
    error_body=lambda error: {"detail": str(error)},
    client_errors=(
        (CheckpointNotFound, 404),
        (UnknownId, 404),
        (SessionFinished, 410),
        (ValueError, 400),
    ),
)
# A signed-URL stand-in: no key, and a link that names no live checkpoint is simply not found.
ARCHIVE_STYLE = dataclasses.replace(
    API_STYLE,
    name="Tinker archive",
    client_of=no_key,
    client_errors=((CheckpointNotFound, 404), (ValueError, 404)),
)


def mount_tinker(
    app: web.Application,
    storage_dir: Path,
    public_url: str,
    knobs: ClientKnobs | None = None,
    lanes: Lanes | None = None,
) -> None:
    """Mount the Tinker API at `/api/v1` and the archive downloads at `/tinker/archives`.

    Checkpoints go to `storage_dir / "tinker"`, which persists across stack restarts;
    archive URLs point back at `public_url`. `knobs` (the control plane's; all off if not
    given) sets each client's injected training-step latency; `lanes` (every name its own
    if not given) which clients share turns and quotas.
    """
    service = TinkerService(
        CheckpointStore(storage_dir / "tinker"), knobs or ClientKnobs(Knobs()), lanes or Lanes()
    )
    app[SERVICE] = service
    app[PUBLIC_URL] = public_url.rstrip("/")

    async def lifetime(api: web.Application) -> AsyncIterator[None]:
        service.start()
        yield
        service.close()

    api = service_app(API_STYLE)
    api.cleanup_ctx.append(lifetime)
    for method, path, handler in _API_ROUTES:
        api.router.add_route(method, path, handler)
    app.add_subapp(API_PREFIX, api)
    archives = service_app(ARCHIVE_STYLE)
    archives.router.add_get("/{model_id}/{kind}/{name}.tar", archive)
    app.add_subapp(ARCHIVE_ROUTE, archives)


def _service(request: web.Request) -> TinkerService:
    return request.config_dict[SERVICE]


def _json(payload: Any) -> web.Response:
    return web.json_response(payload)


async def _body(request: web.Request, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    return await read_body(request, max_bytes=max_bytes)


async def _parsed(request: web.Request, parse: Callable[[bytes], T]) -> T:
    """The body read and `parse`d, off the event loop if it is large (`decode`)."""
    return await decode(parse, await _body(request), lane(request))


def _future(request_id: str, model_id: str) -> web.Response:
    return _json({"request_id": request_id, "model_id": model_id})


# -- client setup and sessions -------------------------------------------------------------


async def client_config(request: web.Request) -> web.Response:
    # No JWT exchange, plain httpx transport, uncompressed forward_backward bodies, and
    # forward_backward chunks no longer than the stack takes (the SDK's default too).
    return _json(
        {
            "pjwt_auth_enabled": False,
            "use_pyqwest_transport": False,
            "fwdbwd_max_chunk_len": requests.MAX_DATUMS,
        }
    )


async def empty(request: web.Request) -> web.Response:
    return _json({})


async def telemetry(request: web.Request) -> web.Response:
    return _json({"status": "accepted"})


async def server_capabilities(request: web.Request) -> web.Response:
    return _json({"supported_models": TinkerService.capabilities()})


async def create_session(request: web.Request) -> web.Response:
    await _parsed(request, requests.create_session)
    session_id = _service(request).create_session(request[CLIENT])
    return _json({"type": "create_session", "session_id": session_id})


async def session_heartbeat(request: web.Request) -> web.Response:
    _service(request).heartbeat(await _parsed(request, requests.session_id), request[CLIENT])
    return _json({"type": "session_heartbeat"})


async def finish_session(request: web.Request) -> web.Response:
    _service(request).finish_session(request.match_info["session_id"], request[CLIENT])
    return _json({})


# -- training models -----------------------------------------------------------------------


async def create_model(request: web.Request) -> web.Response:
    new_model = await _parsed(request, requests.new_model)
    request_id, model_id = _service(request).create_model(new_model, request[CLIENT])
    return _future(request_id, model_id)


async def get_info(request: web.Request) -> web.Response:
    model = _service(request).model(await _parsed(request, requests.model_id), request[CLIENT])
    model_name = model.info.base_model
    return _json(
        {
            "type": "get_info",
            "model_id": model.model_id,
            "model_name": model_name,
            "model_data": {"arch": "llama", "model_name": model_name, "tokenizer_id": model_name},
            "is_lora": True,
            "lora_rank": model.info.lora_rank,
        }
    )


def _queued(
    read: Callable[[bytes], Queued],
    parse: Callable[[Any], Any],
    plan: Callable[[TinkerService, TrainingModel, Any], Job | StepPart],
    max_bytes: int = MAX_BODY_BYTES,
) -> Handler:
    """A handler for a request to a model: `read` its position, queue `plan(parse(rest))`.
    A large body is decoded off the event loop (`local_stack.http.decode`)."""

    async def handler(request: web.Request) -> web.Response:
        service = _service(request)
        body = await _body(request, max_bytes)
        sent = await decode(functools.partial(requests.decoded, read, parse), body, lane(request))
        request_id = service.submit(
            sent.model_id,
            sent.seq_id,
            sent.digest,
            lambda model: plan(service, model, sent.message()),
            request[CLIENT],
        )
        return _future(request_id, sent.model_id)

    return handler


forward_backward = _queued(
    requests.queued_forward_backward,
    requests.forward_backward,
    TinkerService.forward_backward,
    MAX_FORWARD_BACKWARD_BYTES,
)
optim_step = _queued(requests.queued_json, requests.adam_params, TinkerService.optim_step)
save_weights_for_sampler = _queued(
    requests.queued_json, requests.save_weights_for_sampler, TinkerService.save
)
save_weights = _queued(requests.queued_json, requests.save_weights, TinkerService.save)
load_weights = _queued(requests.queued_json, requests.load_weights, TinkerService.load)


async def retrieve_future(request: web.Request) -> web.Response:
    request_id = await _parsed(request, requests.request_id)
    result = await _service(request).result(request_id, LONG_POLL_SECONDS, request[CLIENT])
    if result is None:
        return _json({"type": "try_again", "request_id": request_id, "queue_state": "active"})
    if isinstance(result, ForwardBackwardResult):
        body = wire.encode_forward_backward_output(result)
        return web.Response(body=body, content_type="application/x-protobuf")
    return _json(result)


# -- checkpoints (RestClient) --------------------------------------------------------------


async def weights_info(request: web.Request) -> web.Response:
    info = _service(request).checkpoint_run(await _parsed(request, requests.tinker_path))
    return _json(
        {
            "base_model": info.base_model,
            "is_lora": True,
            "lora_rank": info.lora_rank,
            "train_unembed": info.train_unembed,
            "train_mlp": info.train_mlp,
            "train_attn": info.train_attn,
        }
    )


async def set_ttl(request: web.Request) -> web.Response:
    ttl_seconds = await _parsed(request, requests.ttl_seconds)
    ref = requests.checkpoint_ref(request.match_info)
    _service(request).set_ttl(ref, ttl_seconds, request[CLIENT])
    return _json({})


async def delete_checkpoint(request: web.Request) -> web.Response:
    _service(request).delete(requests.checkpoint_ref(request.match_info), request[CLIENT])
    return _json({})


async def archive_url(request: web.Request) -> web.Response:
    """Where Sail downloads the adapter: a loopback URL on this same server."""
    ref = requests.checkpoint_ref(request.match_info)
    expires = datetime.fromtimestamp(_service(request).archive_expiry(ref), UTC)
    url = f"{request.config_dict[PUBLIC_URL]}{ARCHIVE_ROUTE}/{ref.model_id}/{ref.kind}/{ref.name}"
    return _json({"url": url + ".tar", "expires": expires.isoformat()})


async def archive(request: web.Request) -> web.StreamResponse:
    """The adapter archive itself, after its owner's `archive_latency`; 404 once the
    checkpoint is deleted or expired."""
    service, ref = _service(request), requests.checkpoint_ref(request.match_info)
    service.archive(ref)
    await asyncio.sleep(service.archive_latency(ref))
    path = service.archive(ref)  # again: it may have been deleted meanwhile
    return web.FileResponse(path, headers={"Content-Type": "application/x-tar"})


_CHECKPOINT = "/training_runs/{model_id}/checkpoints/{kind}/{name}"
_API_ROUTES: list[tuple[str, str, Handler]] = [
    ("POST", "/client/config", client_config),
    ("POST", "/client/dynamic_config", empty),
    ("POST", "/create_session", create_session),
    ("POST", "/session_heartbeat", session_heartbeat),
    ("POST", "/sessions/{session_id}/finish", finish_session),
    ("POST", "/telemetry", telemetry),
    ("GET", "/get_server_capabilities", server_capabilities),
    ("POST", "/create_model", create_model),
    ("POST", "/get_info", get_info),
    ("POST", "/forward_backward", forward_backward),
    ("POST", "/optim_step", optim_step),
    ("POST", "/save_weights_for_sampler", save_weights_for_sampler),
    ("POST", "/save_weights", save_weights),
    ("POST", "/load_weights", load_weights),
    ("POST", "/retrieve_future", retrieve_future),
    ("POST", "/weights_info", weights_info),
    ("PUT", _CHECKPOINT + "/ttl", set_ttl),
    ("GET", _CHECKPOINT + "/archive", archive_url),
    ("DELETE", _CHECKPOINT, delete_checkpoint),
]
