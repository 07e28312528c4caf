"""The files in a storage dir by which every process using it shares one local stack.

`stack.json` names the running stack (URL, pid, start-up settings). `stack.lock` (an
`flock`) makes find-or-start and stop atomic across processes, so two kernels starting at
once get one stack. `stack.serving` is locked by the server itself for its whole life and
holds its own URL, pid and settings: a second server cannot start on the same storage dir,
and a process named by a lost or forged `stack.json` is this dir's server only if it is the
one holding that lock. `clients/<pid>` marks each process that uses the stack, so the stack
can tell when nobody needs it any more (see `local_stack.idle`). When that process leaves
(it exits, or its entry is found dead), `departed/<client>` says so until the stack has
released what the client held (see `local_stack.departures`): a client that came and went
between two of the stack's looks is released all the same.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import psutil

from local_stack import config

LOCK_POLL_SECONDS = 0.1


@dataclass(frozen=True)
class StackRecord:
    """What a process needs to reuse a running stack, and what it was started with."""

    url: str
    pid: int
    settings: dict[str, str]


def read_record(storage_dir: Path) -> StackRecord | None:
    try:
        return StackRecord(**json.loads((storage_dir / config.STACK_RECORD_FILE).read_text()))
    except (OSError, ValueError, TypeError):  # absent, or half-written by a crashed writer
        return None


def write_record(storage_dir: Path, record: StackRecord) -> None:
    """Atomically: a reader sees the old record or the new one, never half of one."""
    partial = storage_dir / f"{config.STACK_RECORD_FILE}.{os.getpid()}"
    partial.write_text(json.dumps(asdict(record)))
    partial.replace(storage_dir / config.STACK_RECORD_FILE)


def remove_record(storage_dir: Path, pid: int) -> None:
    """Remove the record if it still names `pid` (a newer stack may have replaced it)."""
    record = read_record(storage_dir)
    if record is not None and record.pid == pid:
        (storage_dir / config.STACK_RECORD_FILE).unlink(missing_ok=True)


def hold_serving(storage_dir: Path, record: StackRecord) -> IO[str] | None:
    """Server side: lock `stack.serving` for as long as the returned file stays open (the
    process's life) and write `record` into it; None if another server holds it."""
    handle = open(storage_dir / config.STACK_SERVING_FILE, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(json.dumps(asdict(record)))
    handle.flush()
    return handle


def serving_record(storage_dir: Path) -> StackRecord | None:
    """The record of the server that holds `stack.serving` now, or None if none does."""
    try:
        handle = open(storage_dir / config.STACK_SERVING_FILE)
    except OSError:
        return None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:  # held: a server is running
            try:
                return StackRecord(**json.loads(handle.read()))
            except (ValueError, TypeError):  # being written at this very moment
                return None
        fcntl.flock(handle, fcntl.LOCK_UN)
        return None


def refusal(storage_dir: Path, running: StackRecord | None) -> str:
    """The one sentence a second server for `storage_dir` exits with; `running` is the
    `serving_record` (None while the server that holds the lock is writing it)."""
    who = f"pid {running.pid} at {running.url}" if running else "one starting now"
    return f"another local stack ({who}) already serves {storage_dir}"


@contextmanager
def locked(storage_dir: Path, timeout: float) -> Iterator[bool]:
    """Hold the storage dir's lock; yields False if it stayed busy for `timeout` seconds.

    The lock dies with its holder's file descriptor, so a killed process never leaves it held.
    """
    with open(storage_dir / config.STACK_LOCK_FILE, "a") as handle:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(LOCK_POLL_SECONDS)
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def add_client(storage_dir: Path, pid: int, client: str = "") -> None:
    """Mark `pid` as using the stack, as the client its keys name (its settings go with it)."""
    clients = storage_dir / config.STACK_CLIENTS_DIR
    clients.mkdir(exist_ok=True)
    entry = {"created": psutil.Process(pid).create_time(), "client": client}
    (clients / str(pid)).write_text(json.dumps(entry))


def remove_client(storage_dir: Path, pid: int) -> None:
    """`pid` stops using the stack; its client is marked as departed."""
    entry = storage_dir / config.STACK_CLIENTS_DIR / str(pid)
    try:
        _, client = _parse_entry(entry.read_text())
    except (OSError, ValueError, TypeError, KeyError):
        client = ""
    _mark_departed(storage_dir, client)
    entry.unlink(missing_ok=True)


def departed_clients(storage_dir: Path) -> set[str]:
    """The clients marked as departed and not yet released (see `forget_departed`)."""
    departed = storage_dir / config.STACK_DEPARTED_DIR
    names = (entry.name for entry in departed.iterdir()) if departed.is_dir() else ()
    return {name for name in names if config.CLIENT_NAME.fullmatch(name)}


def forget_departed(storage_dir: Path, clients: set[str]) -> None:
    """Drop the departure marks of `clients`: what they held has been released."""
    for client in clients:
        (storage_dir / config.STACK_DEPARTED_DIR / client).unlink(missing_ok=True)


def _mark_departed(storage_dir: Path, client: str) -> None:
    """Best effort: a storage dir already deleted (a test's, say) has no stack to tell."""
    if config.CLIENT_NAME.fullmatch(client):  # a bare start time names no client
        departed = storage_dir / config.STACK_DEPARTED_DIR
        with contextlib.suppress(OSError):
            departed.mkdir(exist_ok=True)
            (departed / client).touch()


def live_clients(storage_dir: Path) -> list[int]:
    """Pids of the processes using the stack; forgets those that died without saying so."""
    return sorted(_live_entries(storage_dir))


def live_client_names(storage_dir: Path) -> set[str]:
    """The client names of the processes using the stack."""
    return set(_live_entries(storage_dir).values())


def _live_entries(storage_dir: Path) -> dict[int, str]:
    """{pid: client} of the processes using the stack. A pid counts only with the start time
    it was registered with, so a recycled pid does not keep the stack alive. What is not a
    pid's file (a directory, a stray name) is not ours: it is left alone and ignored."""
    clients = storage_dir / config.STACK_CLIENTS_DIR
    alive = {}
    for entry in clients.iterdir() if clients.is_dir() else ():
        if not entry.name.isdigit() or entry.is_symlink() or not entry.is_file():
            continue
        client = ""
        try:
            created, client = _parse_entry(entry.read_text())
            if psutil.Process(int(entry.name)).create_time() == created:
                alive[int(entry.name)] = client
                continue
        except (psutil.Error, ValueError, TypeError, KeyError, OSError):
            pass
        _mark_departed(storage_dir, client)  # it died without saying so
        entry.unlink(missing_ok=True)
    return alive


def _parse_entry(text: str) -> tuple[float, str]:
    """(start time, client) from `{"created", "client"}`, or from a bare start time."""
    entry = json.loads(text)
    if isinstance(entry, dict):
        return float(entry["created"]), str(entry.get("client", ""))
    return float(entry), ""
