"""A plain Python script that uses the course's `connect` is told in one sentence, within
20 s, when its local stack is stopped, killed or hung, as a kernel's running cell is
(test_stack_watch.py, test_stack_hung.py). Without it the SDKs retry for minutes.

Each script runs in its own process with its own stack (its own storage dir), waiting on
the SDK in a loop, as a training script does (with plain calls, or awaiting in
`asyncio.run`); the test then stops, kills or freezes that stack and waits for the script
to end. Each starts a stack, so there is one test per way a stack goes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from local_stack import registry
from local_stack.client.supervisor import stop_local_stack

ROOT = Path(__file__).resolve().parents[2]
STOP_WITHIN_SECONDS = 20.0  # the acceptance bound: a stall past it fails the test
CONNECT_TIMEOUT_SECONDS = 300.0  # starting a stack on a loaded machine; a hang only
SCRIPTS = {
    "blocking": """
import time
import helpers
course = helpers.connect("local")
print("connected", flush=True)
while True:
    course.service_client.get_server_capabilities()
    time.sleep(0.2)
""",
    "awaiting": """
import asyncio
import helpers

async def main():
    course = helpers.connect("local")
    print("connected", flush=True)
    while True:
        await course.service_client.get_server_capabilities_async()
        await asyncio.sleep(0.2)

asyncio.run(main())
""",
}


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[Path]:
    """The scripts' own stack folder; whatever stack is left there is stopped at the end."""
    folder = tmp_path / "stack"
    yield folder
    record = registry.serving_record(folder)
    if record is not None:
        try:
            psutil.Process(record.pid).send_signal(signal.SIGCONT)
        except psutil.Error:
            pass
    stop_local_stack(folder)


def connected_script(kind: str, storage: Path, tmp_path: Path) -> tuple[subprocess.Popen, int]:
    """A script of `kind` that has connected (its stack started); the stack's pid."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "COURSE_LOCAL_STACK_DIR": str(storage),
        "COURSE_RUNS_DIR": str(tmp_path / "runs"),
    }
    script = subprocess.Popen(
        [sys.executable, "-c", SCRIPTS[kind]],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = script.stdout.readline()  # `connect` bounds its own start-up wait
        assert line == "connected\n", script.communicate(timeout=CONNECT_TIMEOUT_SECONDS)
    except BaseException:
        script.kill()
        raise
    record = registry.read_record(storage)
    assert record is not None
    return script, record.pid


def told(script: subprocess.Popen) -> str:
    """The one sentence the script ended with, once it has ended (a stall fails here)."""
    try:
        _, stderr = script.communicate(timeout=STOP_WITHIN_SECONDS)
    except subprocess.TimeoutExpired:
        script.kill()
        script.communicate()
        pytest.fail(f"the script was not stopped within {STOP_WITHIN_SECONDS:g} s")
    assert script.returncode != 0
    assert "Traceback" not in stderr, stderr[-3000:]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("LocalStackStoppedError: The local stack (pid "), stderr[-3000:]
    assert "re-running the script restarts it" in last
    return last


def test_an_asyncio_script_is_told_when_its_stack_is_killed(storage, tmp_path) -> None:
    """Told inside `asyncio.run`, whose own Ctrl-C handling is in place."""
    script, pid = connected_script("awaiting", storage, tmp_path)
    os.kill(pid, signal.SIGKILL)
    sentence = told(script)
    assert f"(pid {pid}) stopped" in sentence and str(storage / "stack.log") in sentence


def test_a_script_is_told_when_its_stack_is_stopped(storage, tmp_path) -> None:
    """By `make stop` (another process), while the script waits on the SDK."""
    script, pid = connected_script("blocking", storage, tmp_path)
    assert stop_local_stack(storage) == pid
    assert f"(pid {pid}) stopped" in told(script)


def test_a_script_is_told_when_its_stack_is_hung(storage, tmp_path) -> None:
    script, pid = connected_script("blocking", storage, tmp_path)
    os.kill(pid, signal.SIGSTOP)
    sentence = told(script)
    assert "has not answered" in sentence and "stuck" in sentence


def test_a_script_that_stops_its_own_stack_is_not_stopped(storage, tmp_path) -> None:
    """Stopping the stack on purpose (as scripts/train_shell_policy.py does at its end) is
    no failure to report."""
    script = """
import helpers
from local_stack.client.supervisor import stop_local_stack
helpers.connect("local")
stop_local_stack()
import time
time.sleep(3)
print("finished", flush=True)
"""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "COURSE_LOCAL_STACK_DIR": str(storage),
        "COURSE_RUNS_DIR": str(tmp_path / "runs"),
    }
    finished = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=CONNECT_TIMEOUT_SECONDS,
    )
    assert finished.returncode == 0 and finished.stdout == "finished\n", finished.stderr[-3000:]
