"""Find, start and stop the local stack: one server per storage dir, shared by every process.

The first process that needs it (a kernel calling `connect("local")`) starts the server
detached: in its own session (Jupyter interrupts a kernel by signalling the kernel's whole
process group, which must stop the cell, not the server), with its output in `stack.log`,
and tied to no process's life, so it outlives any one kernel. Its URL and pid go to
`stack.json` in the storage dir; later processes find it there, check that it answers, and
reuse it, under a lock so that two kernels starting at once start one stack (see
`local_stack.registry`). It stops with `python -m local_stack stop` (`make stop`), or by
itself once nobody has used it for a while (`local_stack.idle`).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import psutil

from local_stack import config, registry
from local_stack.client import watch
from local_stack.registry import StackRecord

START_TIMEOUT_SECONDS = 120.0
STOP_TIMEOUT_SECONDS = 10.0
LOCK_TIMEOUT_SECONDS = 2 * START_TIMEOUT_SECONDS + 60  # another process may be starting it
HEALTH_PATIENCE_SECONDS = 15.0  # for a running stack that is slow to answer
HEALTH_RETRY_SECONDS = 0.5
LOG_LINES_ON_FAILURE = 20
_NO_PROXY_NAMES = ("NO_PROXY", "no_proxy")


@dataclass(frozen=True)
class LocalStack:
    """A running local stack: its base URL, server pid and storage directory."""

    url: str
    pid: int
    storage_dir: Path

    @property
    def log_path(self) -> Path:
        """The server's stderr (warnings, tracebacks), appended to across restarts."""
        return self.storage_dir / config.STACK_LOG_FILE


_attached: LocalStack | None = None
_saved_env: dict[str, str | None] = {}


def start_local_stack() -> LocalStack:
    """Use this storage dir's stack, starting it if none runs, and point the SDKs at it."""
    global _attached
    stack = ensure_local_stack()
    registry.add_client(stack.storage_dir, os.getpid(), config.process_client())
    _attached = stack
    _point_sdks_at(stack.url)
    return stack


def ensure_local_stack(storage_dir: Path | None = None) -> LocalStack:
    """The healthy stack of `storage_dir` (default: this process's), started if none runs.

    A stack started with other settings (latency, faults, seed, threads) is not silently
    reused: that is an error naming both, since restarting it would break other kernels."""
    storage = (storage_dir or config.storage_dir()).resolve()
    storage.mkdir(parents=True, exist_ok=True)
    settings = config.stack_settings()
    with _lock(storage):
        record = _serving_record(storage, patience=HEALTH_PATIENCE_SECONDS)
        if record is None:
            _retire(storage)
            _sweep_sandboxes()
            record = _start(storage, settings)
        elif record.settings != settings:
            raise RuntimeError(
                f"the local stack for {storage} runs with settings {record.settings}, not "
                f"{settings}; stop it first (make stop) or set {config.STORAGE_DIR_VAR} "
                "to another folder"
            )
        elif registry.read_record(storage) != record:  # stack.json lost or overwritten
            registry.write_record(storage, record)
    return LocalStack(record.url, record.pid, storage)


def running_local_stack(storage_dir: Path | None = None) -> LocalStack | None:
    """The healthy stack of `storage_dir`, or None; never starts one."""
    storage = (storage_dir or config.storage_dir()).resolve()
    record = _serving_record(storage)
    return None if record is None else LocalStack(record.url, record.pid, storage)


def detach_local_stack() -> None:
    """This process stops using the stack, which keeps serving the others: restore the SDK
    variables it replaced (the keys from your shell) and leave the stack's clients."""
    global _attached
    if _attached is None:
        return
    registry.remove_client(_attached.storage_dir, os.getpid())
    _attached = None
    _restore_env()


def stop_local_stack(storage_dir: Path | None = None) -> int | None:
    """Stop the stack of `storage_dir` (default: this process's), whoever started it.

    Returns the pid it stopped, or None if no stack was running there."""
    storage = (storage_dir or config.storage_dir()).resolve()
    if _attached is not None and _attached.storage_dir == storage:
        watch.stop_watching()  # stopped on purpose: no running cell or script to stop
        detach_local_stack()
    if not storage.is_dir():
        return None
    with _lock(storage):
        record = _current_record(storage)
        if record is None:
            return None
        registry.remove_record(storage, record.pid)
        return record.pid if _terminate(record.pid, storage) else None


def server_processes(**environment: str) -> list[psutil.Process]:
    """The running local stack servers whose environment has these values, e.g.
    `server_processes(COURSE_LOCAL_STACK_DIR=...)`: tests and benchmarks count them."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            command = process.info["cmdline"] or []
            env = process.environ() if "local_stack" in command and "serve" in command else {}
        except psutil.Error:  # exited meanwhile, or another user's
            continue
        if env and all(env.get(name) == value for name, value in environment.items()):
            found.append(process)
    # A server's decode process is a fork of it, with its command and environment: part of
    # that server, not another one (it dies with it, `local_stack.engine.compute`).
    servers = {process.pid for process in found}
    return [process for process in found if _parent_pid(process) not in servers]


def _parent_pid(process: psutil.Process) -> int | None:
    try:
        return process.ppid()
    except psutil.Error:
        return None


@contextmanager
def _lock(storage: Path) -> Iterator[None]:
    """The storage dir's lock, or one sentence if another process never lets go of it."""
    with registry.locked(storage, LOCK_TIMEOUT_SECONDS) as held:
        if not held:
            lock = storage / config.STACK_LOCK_FILE
            raise RuntimeError(f"another process has held {lock} for too long")
        yield


def _current_record(storage: Path) -> StackRecord | None:
    """The record of the server that holds this storage dir's serving lock, or None.

    `stack.json` is only a hint: a record naming another process (forged, or left by a
    server that died) is ignored, and a running server whose `stack.json` was deleted is
    still found, by the record it keeps in its lock file."""
    serving = registry.serving_record(storage)
    if serving is None:
        return None
    record = registry.read_record(storage)
    return record if record is not None and record.pid == serving.pid else serving


def _serving_record(storage: Path, patience: float = 0.0) -> StackRecord | None:
    """The record, if the server it names answers as that pid for that storage dir. A server
    that is alive but slow to answer (a busy machine) gets `patience` seconds."""
    record = _current_record(storage)
    if record is None:
        return None
    deadline = time.monotonic() + patience
    while not _answers(record, storage):
        if time.monotonic() >= deadline or _server_process(record.pid, storage) is None:
            return None
        time.sleep(HEALTH_RETRY_SECONDS)
    return record


def _answers(record: StackRecord, storage: Path) -> bool:
    health = _health(record.url) or {}
    return (health.get("pid"), health.get("storage_dir")) == (record.pid, str(storage))


def _start(storage: Path, settings: dict[str, str]) -> StackRecord:
    log_path = storage / config.STACK_LOG_FILE
    env = {**os.environ, "PYTHONPATH": _with_repo_on_path(os.environ.get("PYTHONPATH"))}
    env[config.STORAGE_DIR_VAR] = str(storage)
    with open(log_path, "a") as log:  # appended: a dead stack's log survives the restart
        log.write(f"--- local stack starting at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
        log.flush()
        process = subprocess.Popen(
            [sys.executable, "-m", "local_stack", "serve", "--port", "0"],
            cwd=config.REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,  # carries one line, the URL; then the server closes it
            stderr=log,
            text=True,
            start_new_session=True,
        )
    announced = process.stdout
    assert announced is not None  # stdout=PIPE
    # Reap it whenever it exits, so that while this process lives it leaves no zombie.
    threading.Thread(target=process.wait, name="local-stack-reaper", daemon=True).start()
    try:
        url = _read_announced_url(announced, process, log_path)
        record = StackRecord(url, process.pid, settings)
        _wait_until_serving(record, storage, process, log_path)
    except BaseException:
        with contextlib.suppress(psutil.NoSuchProcess):  # ours, whether or not it got the lock
            _terminate_process(psutil.Process(process.pid))
        raise
    finally:
        announced.close()
    registry.write_record(storage, record)
    return record


def _sweep_sandboxes() -> None:
    """Release the sandboxes of kernels killed while they held one (their mounts, folders and
    cgroups), as every new sandbox also does; a sweep that fails must not stop the start."""
    from local_stack.client.sailbox.enclosure import sweep_abandoned

    try:
        sweep_abandoned()
    except (OSError, subprocess.SubprocessError) as error:
        print(f"local stack: could not sweep abandoned sandboxes ({error})", file=sys.stderr)


def _with_repo_on_path(pythonpath: str | None) -> str:
    return os.pathsep.join([str(config.REPO_ROOT), *([pythonpath] if pythonpath else [])])


def _read_announced_url(announced: IO[str], process: subprocess.Popen[str], log_path: Path) -> str:
    """The server's first line on `announced` (its stdout), `{"url", "pid"}`, printed once the
    model is loaded."""
    executor = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        line = executor.submit(announced.readline).result(timeout=START_TIMEOUT_SECONDS)
    except concurrent.futures.TimeoutError:
        raise RuntimeError(f"local stack did not start in {START_TIMEOUT_SECONDS:.0f} s") from None
    finally:
        executor.shutdown(wait=False)
    if not line:
        _raise_exited(process, log_path)
    return json.loads(line)["url"]


def _wait_until_serving(
    record: StackRecord, storage: Path, process: subprocess.Popen[str], log_path: Path
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not _answers(record, storage):
        if process.returncode is not None:
            _raise_exited(process, log_path)
        if time.monotonic() > deadline:
            raise RuntimeError(f"local stack at {record.url} never became healthy")
        time.sleep(0.05)


def _raise_exited(process: subprocess.Popen[str], log_path: Path) -> None:
    code = process.wait()
    tail = log_path.read_text().splitlines()[-LOG_LINES_ON_FAILURE:]
    raise RuntimeError(
        f"local stack exited during start-up (code {code}); the end of {log_path}:\n"
        + "\n".join(tail)
    )


def _health(url: str) -> dict[str, object] | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"{url}/healthz", timeout=2) as reply:
            return json.loads(reply.read()) if reply.status == 200 else None
    except (OSError, ValueError):
        return None


def _retire(storage: Path) -> None:
    """Stop the server that holds this storage dir but does not answer (hung, or too busy
    to): a new stack must not serve the same storage dir beside it."""
    record = _current_record(storage)
    if record is not None:
        _terminate(record.pid, storage)
        registry.remove_record(storage, record.pid)


def _server_process(pid: int, storage: Path) -> psutil.Process | None:
    """The process `pid` if it is the local stack server of `storage` (it holds the storage
    dir's serving lock), else None: it died, or the pid names some other process."""
    serving = registry.serving_record(storage)
    if serving is None or serving.pid != pid:
        return None
    try:
        process = psutil.Process(pid)
        return process if "local_stack" in process.cmdline() else None
    except psutil.Error:
        return None


def _terminate(pid: int, storage: Path) -> bool:
    """SIGTERM `storage`'s server (SIGKILL if it lingers), then wait for its serving lock;
    False if `pid` is not it. The lock goes with the last of the server's threads, which
    can outlive the main one that the process's status reports (seen in CI: a new server
    found the lock still held by a killed one)."""
    process = _server_process(pid, storage)
    if process is None or not _terminate_process(process):
        return False
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while registry.serving_record(storage) is not None and time.monotonic() < deadline:
        time.sleep(0.02)
    return True


def _terminate_process(process: psutil.Process) -> bool:
    try:
        process.terminate()
        try:
            _wait_until_exited(process)
        except psutil.TimeoutExpired:
            process.kill()
            _wait_until_exited(process)
    except psutil.NoSuchProcess:
        pass
    return True


def _wait_until_exited(process: psutil.Process) -> None:
    """Until `process` is gone or a zombie. A zombie has exited and let go of its port and
    files; only its parent's reaping is left, and once the kernel that started the stack has
    exited, that parent is init, which can take seconds (measured 1.6 s here)."""
    deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
    while process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
        if time.monotonic() >= deadline:
            raise psutil.TimeoutExpired(STOP_TIMEOUT_SECONDS, process.pid)
        time.sleep(0.02)


def _point_sdks_at(url: str) -> None:
    """Set the four SDK variables (with this process's own keys), keep loopback off any proxy,
    and drop cached transports."""
    values = {
        "SAIL_API_URL": url,
        "TINKER_BASE_URL": url,
        **config.client_keys(config.process_client()),
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


# A process that exits stops using the stack; the stack itself keeps serving the others.
atexit.register(detach_local_stack)
