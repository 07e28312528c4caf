"""The local stack's one HTTP server: Sail and Tinker APIs on a single loopback port.

`python -m local_stack serve --port 0` runs it in the foreground (that is how
`local_stack.client.supervisor` starts it). With port 0 the socket is bound first, so the Tinker
routes know the public URL they must hand out in archive links.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from aiohttp import web
from yarl import URL

from local_stack import config, departures, guard, idle, registry
from local_stack.control.knobs import ClientKnobs, Knobs
from local_stack.control.routes import control_app
from local_stack.engine import compute
from local_stack.http import LANES
from local_stack.lanes import Lanes
from local_stack.registry import StackRecord
from local_stack.sail.routes import SERVICE as SAIL_SERVICE
from local_stack.sail.routes import sail_app
from local_stack.tinker.routes import SERVICE as TINKER_SERVICE
from local_stack.tinker.routes import mount_tinker

STORAGE_DIR = web.AppKey("storage_dir", Path)
GUARD = web.AppKey("guard", guard.Guard)
WORK_PENDING = web.AppKey[Callable[[], bool]]("work_pending")  # queued or running work


def make_app(public_url: str) -> web.Application:
    """Both APIs plus `GET /healthz`; `app[STORAGE_DIR]` is the persistent storage dir."""
    # Each route reads its body with its own cap (`local_stack.http.read_body`).
    port = URL(public_url).port
    assert port is not None, public_url  # an http:// URL has one, 80 if none is written
    request_guard = guard.Guard(port)
    app = web.Application(middlewares=[request_guard.middleware])
    app[GUARD] = request_guard
    app[STORAGE_DIR] = config.storage_dir()
    app[LANES] = lanes = Lanes.following(app[STORAGE_DIR])
    app.router.add_get("/healthz", healthz)
    knobs = ClientKnobs(
        Knobs.from_settings(config.knob_settings_from_env()), kept=lanes.is_registered
    )
    sail = sail_app(knobs, lanes, lambda url: app[TINKER_SERVICE].expire_archive(url))
    app.add_subapp("/v1", sail)
    control = control_app(knobs, lambda: sail[SAIL_SERVICE].stats())
    app.add_subapp("/local", control)
    mount_tinker(app, app[STORAGE_DIR], public_url, knobs, lanes)

    def release(client: str) -> None:
        """Everything a departed client held in memory (see `local_stack.departures`)."""
        knobs.reset(client)
        if SAIL_SERVICE in sail:  # the model may still be loading
            sail[SAIL_SERVICE].forget_client(client)
        app[TINKER_SERVICE].forget_client(client)

    departures.install(app, app[STORAGE_DIR], release)
    app[WORK_PENDING] = lambda: (
        sail[SAIL_SERVICE].has_pending_work() or app[TINKER_SERVICE].has_pending_work()
    )
    return app


async def healthz(request: web.Request) -> web.Response:
    return web.json_response(
        {"ok": True, "pid": os.getpid(), "storage_dir": str(request.app[STORAGE_DIR])}
    )


def serve(port: int) -> None:
    """Serve until SIGINT/SIGTERM, or until idle (see `local_stack.idle`)."""
    compute.decode_in_a_process()  # first: the child must inherit no socket or lock
    torch.set_num_threads(config.torch_threads())
    max_connections = guard.connection_limit(guard.raise_descriptor_limit())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.HOST, port))
    url = f"http://{config.HOST}:{sock.getsockname()[1]}"
    # Held until this process exits: no second server can serve the same storage dir.
    serving = registry.hold_serving(
        config.storage_dir(), StackRecord(url, os.getpid(), config.stack_settings())
    )
    if serving is None:
        running = registry.serving_record(config.storage_dir())
        sys.exit(registry.refusal(config.storage_dir(), running))
    app = make_app(url)
    idle.install(app, config.storage_dir(), busy=app[WORK_PENDING])
    # The model, tokenizer and libraries are loaded for good: keep the garbage collector from
    # walking them all again. Such a full collection took over a second on a busy machine,
    # and stops every request meanwhile.
    gc.collect()
    gc.freeze()

    def announce() -> None:
        # One JSON line on stdout tells the starter which port we got. Nobody reads the pipe
        # after that, so later prints go to stderr rather than fill it and block the server.
        print(json.dumps({"url": url, "pid": os.getpid()}), flush=True)
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    app.on_shutdown.append(_ignore_further_sigterms)
    try:
        asyncio.run(_serve(app, sock, max_connections, announce))
    except (web.GracefulExit, KeyboardInterrupt):
        pass  # SIGTERM or SIGINT: the app's shutdown and cleanup have run


async def _serve(
    app: web.Application,
    sock: socket.socket,
    max_connections: int,
    announce: Callable[[], None],
) -> None:
    """`web.run_app`, but with the server object in hand, to bound its connections, and
    announcing the URL only once the socket listens: a starter that connects as soon as it
    reads the URL must not find the port refusing (the app's start-up hooks run before
    `SockSite.start` calls `listen`, and a loaded machine can pause us in between)."""
    runner = web.AppRunner(
        app,
        handle_signals=True,
        access_log=None,
        keepalive_timeout=guard.IDLE_CONNECTION_SECONDS,
    )
    await runner.setup()
    assert runner.server is not None
    app[GUARD].bound_connections(runner.server, max_connections)
    try:
        await web.SockSite(runner, sock).start()
        announce()
        await asyncio.Event().wait()  # until a signal raises GracefulExit
    finally:
        await runner.cleanup()


async def _ignore_further_sigterms(app: web.Application) -> None:
    """A second SIGTERM during shutdown (`make stop` while the stack is stopping itself for
    idleness, say) would abort aiohttp's cleanup with a traceback."""
    asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
