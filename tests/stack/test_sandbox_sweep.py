"""A kernel killed while it holds a sandbox leaves nothing once the next sandbox is made or
the next stack starts: no tmpfs mount, no folder, no memory cgroup.

The kernel is a child process that creates a real sandbox and runs a command in it; the
test SIGKILLs it, so no cleanup of its own runs. Where this machine cannot mount or create
cgroups (not root), only the folder exists to be left behind, and only it is checked.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_stack.client.sailbox import isolation, local_sandbox_factory
from local_stack.client.sailbox.enclosure import Enclosure, sweep_abandoned, totals_problem
from local_stack.client.sailbox.isolation import ResourceLimits, SandboxIdentity
from local_stack.client.supervisor import ensure_local_stack, stop_local_stack
from tests.wait_support import wait_until

ROOT = Path(__file__).resolve().parents[2]
# A kernel that holds a sandbox with a command running in it, until it is killed.
HOLDING_KERNEL = """
import asyncio, json
from local_stack.client.sailbox import local_sandbox_factory

async def hold():
    sandbox = await local_sandbox_factory(".", None)
    print(json.dumps({"host_dir": str(sandbox.host_dir)}), flush=True)
    await sandbox.run_command("sleep 600", timeout=None)

asyncio.run(hold())
"""

pytestmark = pytest.mark.skipif(
    isolation.isolation_problem() is not None, reason="this machine cannot isolate commands"
)


def mounted(path: Path) -> bool:
    mount_points = [
        line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
    ]
    return str(path) in mount_points


def cgroup_of(host_dir: Path) -> Path | None:
    """The cgroup the sandbox's owner file names (None where totals are not enforced)."""
    recorded = json.loads(Path(f"{host_dir}.owner").read_text())["cgroup"]
    return None if recorded is None else Path(recorded)


@pytest.fixture
def killed_kernels_sandbox() -> Iterator[tuple[Path, Path | None]]:
    """(folder, cgroup) of the sandbox of a kernel killed while a command ran in it; both
    checked to be there (and mounted, where totals hold) before the test sweeps."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", HOLDING_KERNEL],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        host_dir = Path(json.loads(kernel.stdout.readline())["host_dir"])
        cgroup = cgroup_of(host_dir)
        if cgroup is not None:
            procs = cgroup / "cgroup.procs"
            wait_until(lambda: procs.read_text().split() != [], "the command to start")
    finally:
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
    assert host_dir.is_dir()
    if totals_problem() is None:
        assert mounted(host_dir) and cgroup is not None and cgroup.is_dir()
    yield host_dir, cgroup
    sweep_abandoned()  # should the test have failed before sweeping


def assert_nothing_left(host_dir: Path, cgroup: Path | None) -> None:
    assert not mounted(host_dir)
    assert not host_dir.exists() and not Path(f"{host_dir}.owner").exists()
    assert cgroup is None or not cgroup.exists()


def test_the_next_sandbox_sweeps_a_killed_kernels_sandbox(killed_kernels_sandbox) -> None:
    host_dir, cgroup = killed_kernels_sandbox
    enclosure = Enclosure.create(ResourceLimits(), SandboxIdentity.pick())
    try:
        assert_nothing_left(host_dir, cgroup)
    finally:
        enclosure.release()


def test_the_next_stack_start_sweeps_a_killed_kernels_sandbox(
    killed_kernels_sandbox, tmp_path: Path
) -> None:
    host_dir, cgroup = killed_kernels_sandbox
    try:
        ensure_local_stack(tmp_path / "stack")
        assert_nothing_left(host_dir, cgroup)
    finally:
        stop_local_stack(tmp_path / "stack")


def test_a_live_kernels_sandbox_is_never_swept() -> None:
    async def sweep_beside_a_live_sandbox() -> tuple[list[Path], Path, bool]:
        sandbox = await local_sandbox_factory(".", None)
        try:
            swept = sweep_abandoned()
            result = await sandbox.run_command("echo kept > kept && cat kept")
            return swept, sandbox.host_dir, result.stdout == "kept\n"
        finally:
            await sandbox.cleanup()

    swept, host_dir, still_works = asyncio.run(sweep_beside_a_live_sandbox())
    assert host_dir not in swept and still_works
    assert not host_dir.exists()


def test_only_an_owner_file_of_this_user_is_judged(tmp_path: Path) -> None:
    """A symlink planted under an owner file's name is not followed, nor swept."""
    target = tmp_path / "precious"
    target.mkdir()
    planted = Path(tempfile.gettempdir(), f"local-sandbox-planted{os.getpid()}.owner")
    planted.symlink_to(target)
    try:
        assert Enclosure.abandoned(planted) is None
        sweep_abandoned()
        assert planted.is_symlink() and target.is_dir()
    finally:
        planted.unlink()
