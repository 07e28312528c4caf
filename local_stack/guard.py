"""What keeps one loopback server usable by every kernel, whatever one of them sends.

- `Host` must name loopback with the server's port: a web page whose domain an attacker
  re-points at 127.0.0.1 (DNS rebinding) sends its own domain there, and is refused.
- A request body must arrive within BODY_SECONDS: a client that trickles a body byte by
  byte gets 408 instead of holding a request (and the idle stop) open for ever. Idle
  connections close after IDLE_CONNECTION_SECONDS (aiohttp's keep-alive timeout, which also
  covers a connection that never finishes its headers).
- Connections are bounded below the descriptor limit, which `raise_descriptor_limit` lifts
  to the hard limit at start: past MAX_CONNECTIONS the oldest connections are closed (each
  after the request it is serving), so a new one, `/healthz` say, still gets in.
"""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Awaitable, Callable

from aiohttp import web

from local_stack.http import ApiError

BODY_SECONDS = 30.0
IDLE_CONNECTION_SECONDS = 60.0
# Descriptors kept free: the event loop accepts up to its backlog (128) of connections
# before the bound sees them, and the rest is for model files, archives, the log and the
# sandbox's pipes.
RESERVED_DESCRIPTORS = 256
MAX_CONNECTIONS = 4096
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def raise_descriptor_limit() -> int:
    """Raise this process's soft limit on open files to its hard limit; the new soft limit.

    Under the common `ulimit -n 1024`, a thousand idle connections would otherwise leave
    none for `/healthz`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 65536)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass  # some platforms cap it lower (macOS: OPEN_MAX); the old limit stands
    return soft


def connection_limit(descriptor_limit: int) -> int:
    return max(16, min(MAX_CONNECTIONS, descriptor_limit - RESERVED_DESCRIPTORS))


class Guard:
    """The root app's middleware (loopback `Host` only, bodies within BODY_SECONDS), and
    the bound on connections, which needs to know which connections are serving a request."""

    def __init__(self, port: int) -> None:
        self._allowed = {f"{name}:{port}" for name in LOOPBACK_NAMES}
        self._port = port
        self._serving: dict[web.RequestHandler, int] = {}  # connection -> requests in flight

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        host = request.headers.get("Host", "")
        if host.lower() not in self._allowed:
            return web.json_response(
                {
                    "error": {
                        "message": f"the Host header {host[:100]!r} is not this loopback "
                        f"server (expected 127.0.0.1:{self._port} or localhost:{self._port})",
                        "type": "invalid_request_error",
                        "code": "host_not_allowed",
                    }
                },
                status=403,
            )
        connection = request.protocol
        self._serving[connection] = self._serving.get(connection, 0) + 1
        late = None
        if request.body_exists:
            late = asyncio.get_running_loop().call_later(BODY_SECONDS, _too_slow, request)
        try:
            return await handler(request)
        finally:
            if late is not None:
                late.cancel()
            self._serving[connection] -= 1
            if not self._serving[connection]:
                del self._serving[connection]

    def bound_connections(self, server: web.Server, limit: int) -> None:
        """Close the oldest connections whenever `server` holds more than `limit`.

        An idle connection (or one still sending its headers) closes at once, and its
        client reconnects if it needs to; one serving a request closes after answering it,
        so a poll in flight still gets its answer."""
        made = server.connection_made

        def connection_made(handler: web.RequestHandler, transport: asyncio.Transport) -> None:
            made(handler, transport)
            connections = server.connections  # oldest first
            for old in connections[: max(0, len(connections) - limit)]:
                if old in self._serving:
                    old.close()
                else:
                    old.force_close()

        server.connection_made = connection_made  # type: ignore[method-assign]


def _too_slow(request: web.Request) -> None:
    """A body still arriving after BODY_SECONDS: its reader gets a 408 error."""
    if not request.content.is_eof():
        request.content.set_exception(
            ApiError(f"the request body did not arrive within {BODY_SECONDS:g} seconds", status=408)
        )
