"""The stack's housekeeping is exact: it clears what crashed saves left, it is found by the
lock it holds rather than by `stack.json` alone (so a lost record cannot start a second
server, and a forged one cannot make `stop` kill another process), the idle stop survives
junk in `clients/`, and a stack never idles out under work it has accepted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from local_stack import config, registry
from local_stack.client.supervisor import ensure_local_stack, server_processes, stop_local_stack
from local_stack.engine.checkpoints import CheckpointStore
from local_stack.registry import StackRecord
from tests.sail_support import HTTP, create_body, post_create
from tests.wait_support import wait_until

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def own_stack(tmp_path: Path):
    """A stack of its own in `tmp_path`, stopped afterwards whatever the test did."""
    yield tmp_path
    stop_local_stack(tmp_path)
    for process in server_processes(**{config.STORAGE_DIR_VAR: str(tmp_path.resolve())}):
        process.kill()


def decoy(tmp_path: Path) -> subprocess.Popen:
    """A process that looks like a stack server by its command line, but serves nothing."""
    return subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(120)", "local_stack", "serve"],
        env={**os.environ, config.STORAGE_DIR_VAR: str(tmp_path.resolve())},
    )


def test_staging_leftovers_are_removed_at_start(tmp_path: Path) -> None:
    leftover = tmp_path / "tinker" / ".staging" / "0123abcd"
    leftover.mkdir(parents=True)
    (leftover / "adapter_model.safetensors").write_bytes(b"half a save")
    store = CheckpointStore(tmp_path / "tinker")
    assert not (tmp_path / "tinker" / ".staging").exists()
    with pytest.raises(OSError, match="disk full"), store.staging_dir() as staging:
        (staging / "part").write_text("x")
        raise OSError("disk full")  # a save that fails half way
    assert list((tmp_path / "tinker" / ".staging").iterdir()) == []


def test_junk_in_clients_is_ignored(tmp_path: Path) -> None:
    clients = tmp_path / config.STACK_CLIENTS_DIR
    (clients / "12345").mkdir(parents=True)  # a directory named like a pid
    (clients / "notes.txt").write_text("not a pid")
    (clients / "777").write_text("{not json")
    registry.add_client(tmp_path, os.getpid(), "me")
    assert registry.live_clients(tmp_path) == [os.getpid()]
    assert registry.live_client_names(tmp_path) == {"me"}
    # Junk that is not a pid's file is left alone; a broken pid file is ours to remove.
    assert sorted(p.name for p in clients.iterdir()) == sorted(
        ["12345", "notes.txt", str(os.getpid())]
    )


def test_a_lost_stack_json_finds_the_running_stack_and_no_second_server_starts(
    own_stack: Path,
) -> None:
    first = ensure_local_stack(own_stack)
    (own_stack / config.STACK_RECORD_FILE).unlink()
    again = ensure_local_stack(own_stack)
    assert (again.pid, again.url) == (first.pid, first.url)
    assert registry.read_record(own_stack).pid == first.pid  # the record is back
    # A server started by hand on the same folder refuses, in one sentence.
    second = subprocess.run(
        [sys.executable, "-m", "local_stack", "serve", "--port", "0"],
        env={**os.environ, config.STORAGE_DIR_VAR: str(own_stack), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert second.returncode != 0
    assert f"(pid {first.pid} at {first.url}) already serves" in second.stderr
    assert [p.pid for p in server_processes(**{config.STORAGE_DIR_VAR: str(own_stack)})] == [
        first.pid
    ]


def test_stop_kills_only_the_server_that_holds_the_folder(own_stack: Path) -> None:
    fake = decoy(own_stack)
    try:
        forged = StackRecord("http://127.0.0.1:9", fake.pid, config.stack_settings())
        registry.write_record(own_stack, forged)
        assert stop_local_stack(own_stack) is None  # no stack runs: nothing to stop
        assert fake.poll() is None, "stop killed the process a forged stack.json named"
        stack = ensure_local_stack(own_stack)  # the forged record does not stand in its way
        registry.write_record(own_stack, forged)
        assert stop_local_stack(own_stack) == stack.pid
        assert fake.poll() is None
        assert not psutil.pid_exists(stack.pid) or psutil.Process(stack.pid).status() == (
            psutil.STATUS_ZOMBIE
        )
    finally:
        fake.kill()
        fake.wait()


def test_a_short_idle_limit_waits_for_a_background_response(
    own_stack: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle limit 3 s, responses held 8 s: the stack must still hold the response when it
    is done, and keep it long enough to hand it over."""
    monkeypatch.setenv(config.IDLE_MINUTES_VAR, "0.05")
    monkeypatch.setenv(config.SAIL_LATENCY_VAR, "8")
    stack = ensure_local_stack(own_stack)  # not registered as a client: only work keeps it
    key = config.SAIL_KEY_PREFIX + "idletest"
    created = post_create(stack.url, create_body(), key=key).json()
    assert created["status"] == "queued"
    time.sleep(8.5)  # no request meanwhile: only the queued response keeps the stack up
    reply = HTTP.request(
        "GET",
        f"{stack.url}/v1/responses/{created['id']}",
        headers={"Authorization": f"Bearer {key}"},
    )
    assert reply.json()["status"] in {"completed", "incomplete"}  # done (or at max tokens)
    wait_until(
        lambda: not psutil.pid_exists(stack.pid) or psutil.Process(stack.pid).status() == "zombie",
        "the stack to idle out once the work was done",
        120,
    )
    assert "no client and no request" in (own_stack / config.STACK_LOG_FILE).read_text()


def test_the_record_in_the_lock_file_is_only_believed_while_held(tmp_path: Path) -> None:
    record = StackRecord("http://127.0.0.1:1", os.getpid(), {})
    (tmp_path / config.STACK_SERVING_FILE).write_text(json.dumps(record.__dict__))
    assert registry.serving_record(tmp_path) is None  # written, but nobody holds it
    handle = registry.hold_serving(tmp_path, record)
    try:
        assert registry.serving_record(tmp_path) == record
        assert registry.hold_serving(tmp_path, record) is None  # one holder at a time
    finally:
        handle.close()
    assert registry.serving_record(tmp_path) is None
