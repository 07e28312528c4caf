"""Start and stop the local stack from a notebook or a test: one server subprocess per process.

The server must never outlive the process that started it (a crashed kernel or a killed
test run must not leave a port bound), so three things stop it: PR_SET_PDEATHSIG (the
kernel signals it when the starting thread dies), a parent-pid watchdog inside the server,
and an atexit handler here.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from local_stack import config

START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 10.0
PR_SET_PDEATHSIG = 1
_NO_PROXY_NAMES = ("NO_PROXY", "no_proxy")

# PR_SET_PDEATHSIG fires when the *thread* that forked dies, so the server is spawned from
# this executor's thread, which lives as long as the interpreter.
_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-stack")


@dataclass(frozen=True)
class LocalStack:
    """A running local stack: its base URL, server pid and storage directory."""

    url: str
    pid: int
    storage_dir: Path

    @property
    def log_path(self) -> Path:
        """The server's stderr (warnings, tracebacks), appended to across restarts."""
        return self.storage_dir / config.LOG_FILE_NAME


_running: tuple[LocalStack, subprocess.Popen[str]] | None = None
_saved_env: dict[str, str | None] = {}


def start_local_stack() -> LocalStack:
    """Start the stack (or reuse the healthy one this process started) and point the SDKs at it."""
    global _running
    if _running is not None:
        stack, process = _running
        if process.poll() is None and _healthy(stack.url):
            _point_sdks_at(stack.url)
            return stack
        stop_local_stack()
    process = _SPAWNER.submit(_spawn).result()
    try:
        announced = _read_announcement(process)
        _wait_until_healthy(announced["url"], process)
    except BaseException:
        _terminate(process)
        raise
    stack = LocalStack(announced["url"], process.pid, config.storage_dir())
    _running = (stack, process)
    _point_sdks_at(stack.url)
    return stack


def stop_local_stack() -> None:
    """Stop the server this process started, if any, and restore the SDK environment."""
    global _running
    if _running is None:
        return
    _, process = _running
    _running = None
    _terminate(process)
    _restore_env()


def _spawn() -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "local_stack", "serve", "--port", "0"]
    command += ["--parent-pid", str(os.getpid())]
    env = {**os.environ, "PYTHONPATH": _with_repo_on_path(os.environ.get("PYTHONPATH"))}
    env[config.STORAGE_DIR_VAR] = str(config.storage_dir())
    log = _open_log()
    process = subprocess.Popen(
        command,
        cwd=config.REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
        # Its own process group: Jupyter interrupts a kernel by signalling the kernel's whole
        # group, which must stop the cell, not the server.
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )
    log.close()  # the server has its own copy
    return process


def _open_log() -> TextIO:
    """The log a notebook points to when its stack dies; appended to, one header per start."""
    log = config.log_path().open("a")
    log.write(f"--- local stack starting at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
    log.flush()
    return log


def _die_with_parent() -> None:
    """Runs in the child before exec: ask Linux to SIGTERM it when the parent dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _with_repo_on_path(pythonpath: str | None) -> str:
    return os.pathsep.join([str(config.REPO_ROOT), *([pythonpath] if pythonpath else [])])


def _read_announcement(process: subprocess.Popen[str]) -> dict[str, object]:
    """The server's first stdout line: `{"url", "pid"}` once the model is loaded."""
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        line = executor.submit(process.stdout.readline).result(timeout=START_TIMEOUT_SECONDS)
    except concurrent.futures.TimeoutError:
        raise RuntimeError(f"local stack did not start in {START_TIMEOUT_SECONDS:.0f} s") from None
    finally:
        executor.shutdown(wait=False)
    if not line:
        raise RuntimeError(
            f"local stack exited during start-up (code {process.wait()}); see {config.log_path()}"
        )
    return json.loads(line)


def _wait_until_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _healthy(url):
        if process.poll() is not None:
            raise RuntimeError(
                f"local stack exited during start-up (code {process.returncode}); "
                f"see {config.log_path()}"
            )
        if time.monotonic() > deadline:
            raise RuntimeError(f"local stack at {url} never became healthy")
        time.sleep(0.05)


def _healthy(url: str) -> bool:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/healthz", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def _terminate(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if process.stdout is not None:
        process.stdout.close()


def _point_sdks_at(url: str) -> None:
    """Set the four SDK variables, keep loopback off any proxy, and drop cached transports."""
    values = {
        "SAIL_API_URL": url,
        "SAIL_API_KEY": config.SAIL_API_KEY,
        "TINKER_BASE_URL": url,
        "TINKER_API_KEY": config.TINKER_API_KEY,
    }
    for name in _NO_PROXY_NAMES:
        hosts = [h for h in os.environ.get(name, "").split(",") if h]
        values[name] = ",".join(hosts + [h for h in config.LOOPBACK_HOSTS if h not in hosts])
    for name, value in values.items():
        _saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = value
    _reset_sail_transports()


def _restore_env() -> None:
    for name, value in _saved_env.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    _saved_env.clear()
    _reset_sail_transports()


def _reset_sail_transports() -> None:
    import sail

    sail.reset_transports()


atexit.register(stop_local_stack)
