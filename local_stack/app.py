"""The local stack's one HTTP server: Sail and Tinker APIs on a single loopback port.

`python -m local_stack serve --port 0` runs it in the foreground (that is how
`local_stack.supervisor` starts it). With port 0 the socket is bound first, so the Tinker
routes know the public URL they must hand out in archive links.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys

import torch
from aiohttp import web

from local_stack import config, idle
from local_stack.sail import server as sail_server
from local_stack.tinker import server as tinker_server

PARENT_POLL_SECONDS = 0.5


def make_app(public_url: str) -> web.Application:
    """Both APIs plus `GET /healthz`; `app["storage_dir"]` is the persistent storage dir."""
    app = web.Application(client_max_size=256 * 1024**2)
    app["storage_dir"] = config.storage_dir()
    app["public_url"] = public_url
    app.router.add_get("/healthz", healthz)
    sail_server.setup(app)
    tinker_server.setup(app, public_url)
    return app


async def healthz(request: web.Request) -> web.Response:
    return web.json_response(
        {"ok": True, "pid": os.getpid(), "storage_dir": str(request.app["storage_dir"])}
    )


def serve(port: int, parent_pid: int | None) -> None:
    """Serve until SIGINT/SIGTERM, or until the parent process goes away."""
    torch.set_num_threads(config.torch_threads())
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.HOST, port))
    url = f"http://{config.HOST}:{sock.getsockname()[1]}"
    app = make_app(url)
    idle.install(app, config.storage_dir())
    if parent_pid is not None:
        app.on_startup.append(lambda app: _watch_parent(app, parent_pid))

    async def announce(app: web.Application) -> None:
        # One JSON line on stdout tells the starter which port we got. Nobody reads the pipe
        # after that, so later prints go to stderr rather than fill it and block the server.
        print(json.dumps({"url": url, "pid": os.getpid()}), flush=True)
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    app.on_startup.append(announce)
    app.on_shutdown.append(_ignore_further_sigterms)
    web.run_app(app, sock=sock, print=None, handle_signals=True)


async def _ignore_further_sigterms(app: web.Application) -> None:
    """A second SIGTERM during shutdown (`make stop` while the stack is stopping itself for
    idleness, say) would abort aiohttp's cleanup with a traceback."""
    asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


async def _watch_parent(app: web.Application, parent_pid: int) -> None:
    """Fallback for PR_SET_PDEATHSIG: exit when re-parented (the parent died)."""

    async def watch() -> None:
        while os.getppid() == parent_pid:
            await asyncio.sleep(PARENT_POLL_SECONDS)
        print("local stack: parent process is gone, exiting", file=sys.stderr, flush=True)
        os.kill(os.getpid(), 15)

    app["parent_watchdog"] = asyncio.ensure_future(watch())
