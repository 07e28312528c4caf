"""One local stack per storage dir, shared by every process that uses it.

Each "kernel" here is a fresh Python process calling `start_local_stack()` (what
`connect("local")` does), which stays attached until the test closes its stdin.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from local_stack import config, registry
from local_stack.client import supervisor
from local_stack.client.supervisor import (
    ensure_local_stack,
    running_local_stack,
    server_processes,
    stop_local_stack,
)
from tests import wait_support

ROOT = Path(__file__).resolve().parents[2]
KERNEL = (
    "import json, sys\n"
    "from local_stack.client.supervisor import start_local_stack\n"
    "stack = start_local_stack()\n"
    "print(json.dumps({'pid': stack.pid, 'url': stack.url}), flush=True)\n"
    "sys.stdin.read()\n"  # attached until the test closes stdin
)
HANG_SECONDS = 180  # generous bounds that only catch hangs
IDLE_SECONDS = 1.2  # the idle limit of the idle-stop test: short, since the test waits 4 of it


def start_kernel(storage: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", KERNEL],
        env={**os.environ, config.STORAGE_DIR_VAR: str(storage), "PYTHONPATH": str(ROOT), **env},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def attached(kernel: subprocess.Popen[str]) -> dict:
    line = kernel.stdout.readline()
    assert line, kernel.stderr.read()[-3000:]
    return json.loads(line)


def release(kernel: subprocess.Popen[str]) -> None:
    kernel.stdin.close()
    kernel.wait(timeout=HANG_SECONDS)
    kernel.stdout.close()
    kernel.stderr.close()


def servers(storage: Path) -> list[psutil.Process]:
    return server_processes(**{config.STORAGE_DIR_VAR: str(storage)})


def exited(pid: int) -> bool:
    """Gone, or a zombie: a stopped stack's parent may not have reaped it yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(condition, what: str) -> None:
    wait_support.wait_until(condition, what, HANG_SECONDS)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict]]]:
    """Four kernels start at the same moment on an empty storage dir, then all exit."""
    storage = tmp_path_factory.mktemp("shared-stack").resolve()
    kernels = [start_kernel(storage) for _ in range(4)]
    try:
        seen = [attached(k) for k in kernels]
    finally:
        for kernel in kernels:
            release(kernel)
    yield storage, seen
    stop_local_stack(storage)


def test_four_kernels_starting_at_once_share_one_stack(shared) -> None:
    storage, seen = shared
    assert len({s["pid"] for s in seen}) == 1 and len({s["url"] for s in seen}) == 1
    assert [p.pid for p in servers(storage)] == [seen[0]["pid"]]


def test_the_stack_outlives_the_kernels_that_used_it(shared) -> None:
    storage, seen = shared
    stack = running_local_stack(storage)
    assert stack is not None and stack.pid == seen[0]["pid"]
    assert registry.live_clients(storage) == []  # each kernel left as it exited


def test_a_later_kernel_reuses_the_running_stack(shared) -> None:
    storage, seen = shared
    kernel = start_kernel(storage)
    try:
        assert attached(kernel)["pid"] == seen[0]["pid"]
        assert registry.live_clients(storage) == [kernel.pid]
    finally:
        release(kernel)


def test_a_kernel_asking_for_other_settings_is_told_to_stop_the_stack(shared) -> None:
    storage, _ = shared
    kernel = subprocess.run(
        [sys.executable, "-c", KERNEL],
        env={**os.environ, config.STORAGE_DIR_VAR: str(storage), config.SAIL_SEED_VAR: "7"},
        input="",
        capture_output=True,
        text=True,
        timeout=HANG_SECONDS,
    )
    assert kernel.returncode != 0
    last_line = kernel.stderr.strip().splitlines()[-1]
    assert "runs with settings {'torch_threads': '1'}" in last_line
    assert "{'seed': '7', 'torch_threads': '1'}" in last_line and "make stop" in last_line


def test_stop_stops_the_stack_whoever_started_it(shared) -> None:
    storage, seen = shared
    assert stop_local_stack(storage) == seen[0]["pid"]
    assert servers(storage) == [] and running_local_stack(storage) is None
    assert not (storage / config.STACK_RECORD_FILE).exists()
    assert stop_local_stack(storage) is None


def test_an_idle_stack_stops_once_its_last_kernel_is_gone(tmp_path: Path) -> None:
    """A short idle limit: a kernel that stays attached keeps the stack four times beyond
    it; once the kernel exits, the stack stops by itself and removes its record."""
    idle = {config.IDLE_MINUTES_VAR: str(IDLE_SECONDS / 60)}
    kernel = start_kernel(tmp_path, **idle)
    try:
        pid = attached(kernel)["pid"]
        time.sleep(4 * IDLE_SECONDS)
        assert not exited(pid), "the stack stopped under an attached kernel"
    finally:
        release(kernel)
    wait_until(lambda: not servers(tmp_path.resolve()), "the idle stack to stop")
    assert not (tmp_path / config.STACK_RECORD_FILE).exists()
    assert "no client and no request" in (tmp_path / config.STACK_LOG_FILE).read_text()


def test_clients_that_died_unannounced_are_forgotten(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    registry.add_client(tmp_path, os.getpid())
    (tmp_path / config.STACK_CLIENTS_DIR / dead.stdout.strip()).write_text("1.0")
    recycled = tmp_path / config.STACK_CLIENTS_DIR / str(os.getppid())
    recycled.write_text("1.0")  # a live pid, but not the process that registered
    assert registry.live_clients(tmp_path) == [os.getpid()]
    assert sorted(p.name for p in (tmp_path / config.STACK_CLIENTS_DIR).iterdir()) == [
        str(os.getpid())
    ]


def test_a_request_resets_the_idle_clock() -> None:
    from aiohttp import web
    from aiohttp.test_utils import TestClient, TestServer

    from local_stack.idle import IdleClock

    clock = IdleClock()
    idle_during_request = []

    async def handler(request: web.Request) -> web.Response:
        idle_during_request.append(clock.idle_for())
        return web.Response(text="ok")

    async def run() -> None:
        app = web.Application(middlewares=[clock.middleware])
        app.router.add_get("/", handler)
        async with TestClient(TestServer(app)) as client:
            clock.last_request -= 3600  # an hour without requests
            assert clock.idle_for() >= 3600
            assert (await client.get("/")).status == 200

    asyncio.run(run())
    assert idle_during_request == [0.0] and clock.idle_for() < 60


def test_a_hung_stack_is_replaced_never_joined(tmp_path: Path) -> None:
    """A server that stops answering (SIGSTOP) gets some patience, then is stopped before a
    new one starts: the storage dir never has two."""
    storage = tmp_path.resolve()
    hung = ensure_local_stack(storage)
    os.kill(hung.pid, signal.SIGSTOP)
    try:
        # The same path with shorter waits: 1 s of patience, not 15, and 1 s (not 10) for
        # the SIGTERM that a stopped process never acts on, before the SIGKILL.
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(supervisor, "HEALTH_PATIENCE_SECONDS", 1.0)
            patch.setattr(supervisor, "STOP_TIMEOUT_SECONDS", 1.0)
            fresh = ensure_local_stack(storage)
        assert fresh.pid != hung.pid and exited(hung.pid)
        assert [p.pid for p in servers(storage)] == [fresh.pid]
    finally:
        if psutil.pid_exists(hung.pid):
            os.kill(hung.pid, signal.SIGKILL)
        stop_local_stack(storage)
