"""A stuck local stack (SIGSTOP, or a freeze holding the interpreter lock) stops the running
cell within about 15 s, in one sentence; a stack that answers `/healthz` is left alone.

As in test_stack_watch.py, the kernel watches a stand-in: here a tiny server that answers
`/healthz` as the stack does, which the test then stops with SIGSTOP. That a busy real
stack keeps answering `/healthz` is in test_fair_stack.py.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_stack.client.watch import HUNG_SECONDS
from tests.kernel_support import run, started_kernel

LOG = Path("/nonexistent/stack/stack.log")  # only quoted, never opened
# Serves `GET /healthz` like the stack; prints its URL once listening.
STAND_IN = """
import http.server, json, sys
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok": true}')
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Health)
print(json.dumps({"url": f"http://127.0.0.1:{server.server_port}"}), flush=True)
server.serve_forever()
"""
# The SIGSTOP comes 1 s into the cell; the acceptance is a stop within 20 s of it. The
# kernel's own timeout bounds the wait: a watch that misses the hang fails the test there.
STOP_WITHIN_SECONDS = 20.0


@pytest.fixture(scope="module")
def kernel() -> Iterator:
    yield from started_kernel()


@pytest.fixture
def stand_in() -> Iterator[tuple[subprocess.Popen, str]]:
    process = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, text=True)
    url = json.loads(process.stdout.readline())["url"]
    yield process, url
    process.kill()  # SIGKILL ends a stopped process too
    process.wait()


def watch(client, pid: int, url: str) -> None:
    run(
        client,
        "import helpers\nfrom local_stack.client.watch import watch_local_stack\n"
        f"watch_local_stack({pid}, __import__('pathlib').Path({str(LOG)!r}), {url!r})",
    )


@pytest.mark.parametrize(
    "cell",
    ["import asyncio\nawait asyncio.sleep(120)", "import time\ntime.sleep(120)"],
    ids=["awaiting", "blocking"],
)
def test_a_stopped_stack_stops_the_running_cell_in_one_sentence(kernel, stand_in, cell) -> None:
    _, client = kernel
    process, url = stand_in
    watch(client, process.pid, url)
    threading.Timer(1.0, process.send_signal, [signal.SIGSTOP]).start()
    reply, errors = run(client, cell, timeout=1.0 + STOP_WITHIN_SECONDS)
    assert reply["status"] == "error"
    [error] = errors
    assert error["ename"] == "LocalStackStoppedError"
    assert f"has not answered {url}/healthz" in error["evalue"] and "stuck" in error["evalue"]
    assert str(LOG) in error["evalue"] and "re-running the notebook" in error["evalue"]
    assert error["traceback"] == [f"LocalStackStoppedError: {error['evalue']}"]
    reply, errors = run(client, "1 + 1")  # a quick cell afterwards still runs
    assert reply["status"] == "ok" and not errors


def test_a_stack_that_answers_is_left_alone(kernel, stand_in) -> None:
    """A cell that runs past HUNG_SECONDS while the stack answers is not stopped."""
    _, client = kernel
    process, url = stand_in
    watch(client, process.pid, url)
    reply, errors = run(client, f"import time\ntime.sleep({HUNG_SECONDS + 3})")
    assert reply["status"] == "ok" and not errors
