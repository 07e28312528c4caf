"""The one handler style of every emulated service: auth and error mapping as a middleware.

Each service is an aiohttp sub-app whose middleware checks the key, runs the handler, and
turns `ApiError` (and anything unexpected) into that service's JSON error shape. Handlers
only raise; none of them builds an error response or checks a key itself.

Unexpected exceptions answer 400, not 500, on purpose: both SDKs retry 5xx for minutes,
which would turn a bug in the stack into a notebook that hangs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from aiohttp import web

from local_stack.config import SAIL_KEY_PREFIX, client_from_key
from local_stack.engine.compute import run_decode
from local_stack.lanes import Lanes

logger = logging.getLogger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")

# Bodies up to this size are decoded on the event loop: the SDKs' own requests (a Sail
# create is a few KB; a forward_backward chunk of a small RL batch tens of KB) decode in well
# under a millisecond there. Larger ones go to the decoder (`decode`), in turns.
INLINE_DECODE_BYTES = 64 * 1024


class ApiError(Exception):
    """A request the service refuses: `status` (4xx), a message, and optionally the
    parameter at fault and a machine-readable `code`."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.param = param
        self.code = code


CLIENT = web.RequestKey("client", str)  # the client a request's key names ("" on keyless routes)
LANES = web.AppKey("lanes", Lanes)  # on the root app: which lane each client takes


def lane(request: web.Request) -> str:
    """The lane the request's client takes (`local_stack.lanes`): its share of the stack's
    threads and its quotas. Without `LANES` (a test's bare app), the client's own."""
    lanes = request.config_dict.get(LANES)
    client = request.get(CLIENT, "")
    return client if lanes is None else lanes.of(client)


@dataclass(frozen=True)
class ServiceStyle:
    """How one service authenticates and how it spells an error body."""

    name: str
    # The client the request's key names, "" for a route that needs no key, None if refused.
    client_of: Callable[[web.Request], str | None]
    unauthorized: ApiError
    error_body: Callable[[ApiError], dict]
    # Exceptions from lower layers that mean "the request is wrong", mapped to a status.
    client_errors: tuple[tuple[type[Exception], int], ...] = ()


def service_middleware(style: ServiceStyle) -> Callable:
    """The middleware for one service's sub-app."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            client = style.client_of(request)
            if client is None:
                raise style.unauthorized
            request[CLIENT] = client
            return await handler(request)
        except web.HTTPException:
            raise  # aiohttp's own answers (404 for an unknown route, 405, ...)
        except ApiError as error:
            return _answer(style, error)
        except Exception as error:
            for kind, status in style.client_errors:
                if isinstance(error, kind):
                    return _answer(style, ApiError(str(error), status=status))
            logger.exception("local %s server error", style.name)
            message = f"local {style.name} server error: {type(error).__name__}: {error}"
            return _answer(style, ApiError(message))

    return middleware


def _answer(style: ServiceStyle, error: ApiError) -> web.Response:
    return web.json_response(style.error_body(error), status=error.status)


def service_app(style: ServiceStyle) -> web.Application:
    """An empty sub-app with the service's middleware; the service adds its routes."""
    return web.Application(middlewares=[service_middleware(style)])


def bearer_client(request: web.Request) -> str | None:
    """The client named by `Authorization: Bearer sk_local_<client>`, or None."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    return client_from_key(key, SAIL_KEY_PREFIX) if scheme == "Bearer" else None


def no_key(request: web.Request) -> str:
    """For routes anyone on loopback may call (a signed URL is its own permission)."""
    return ""


async def read_body(request: web.Request, *, max_bytes: int) -> bytes:
    """The request body, refused (413) as soon as it is larger than `max_bytes`.

    Every route reads its body through this (or `read_json`) with its own cap: the root
    app's `client_max_size` would allow every route the largest any route needs.
    """
    too_large = ApiError(f"the request body is larger than {max_bytes} bytes", status=413)
    if request.content_length is not None and request.content_length > max_bytes:
        raise too_large
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > max_bytes:
            raise too_large
    return bytes(body)


async def read_json(request: web.Request, *, max_bytes: int, json_type_only: bool = False) -> Any:
    """The request body as JSON; oversized, non-UTF-8 or malformed bodies are refused.

    `json_type_only` refuses other content types: a cross-origin page can only send a
    simple POST (text/plain or form-encoded) without a preflight.
    """
    if json_type_only and request.content_type != "application/json":
        raise ApiError(
            f"the body must be sent as application/json, not {request.content_type!r}",
            status=415,
        )
    body = await read_body(request, max_bytes=max_bytes)
    return await decode(_json_body, body, lane(request))


async def decode(parse: Callable[[bytes], T], body: bytes, lane: str) -> T:
    """`parse(body)`: on the event loop if the body is small, else on the decoder in
    `lane`'s turn, so that no body, however large, stops the stack's other requests."""
    if len(body) <= INLINE_DECODE_BYTES:
        return parse(body)
    return await run_decode(parse, body, client=lane)


def _json_body(body: bytes) -> Any:
    try:
        return strict_json(body.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError("the request body is not UTF-8 text") from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ApiError(f"the request body is not valid JSON: {exc}") from None


def strict_json(text: str) -> Any:
    """`json.loads` without the NaN and Infinity Python's parser accepts (they are not JSON).

    Raises json.JSONDecodeError, or RecursionError for absurdly deep nesting.
    """
    return json.loads(text, parse_constant=_refuse_constant)


def _refuse_constant(name: str) -> Any:
    raise json.JSONDecodeError(f"{name} is not a JSON value", name, 0)
