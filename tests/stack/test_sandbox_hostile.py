"""A policy that attacks its sandbox: the host's secrets, the grader, the machine's resources
and the lifetime budget. Each test also shows the attack is real where it could be."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import subprocess
import uuid
from pathlib import Path

import psutil
import pytest
from sandbox_probes import ENV_DIR, MARKER_VARIABLE, TASK_DIR, processes_with, run
from tinker_cookbook.recipes.harbor_rl.harbor_tools import HarborReward
from tinker_cookbook.sandbox.sandbox_interface import SandboxTerminatedError

from local_stack.client.sailbox import LocalSandbox, ResourceLimits, local_sandbox_factory
from local_stack.client.sailbox.enclosure import totals_problem
from local_stack.client.sailbox.isolation import SANDBOX_ENV
from shell_tasks.harbor_task import grade_in_fresh_sandbox, load_harbor_task

needs_totals = pytest.mark.skipif(
    totals_problem() is not None, reason=f"per-sandbox totals unavailable: {totals_problem()}"
)


# --- the host's environment ----------------------------------------------------------------


def test_nothing_of_the_hosts_environment_is_readable_inside(monkeypatch) -> None:
    canary = f"canary-{uuid.uuid4().hex}"
    for name in ("SANDBOX_CANARY", "HF_TOKEN", "TINKER_API_KEY", "SAIL_API_KEY"):
        monkeypatch.setenv(name, f"{canary}-{name}")
    read_processes = (
        'for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do echo "== $f";'
        " tr '\\0' '\\n' < $f; done; echo '== env'; env"
    )
    # The canary reaches grep as a pattern on a pipe, so no command line inside holds it.
    escaped = "".join(f"\\x{byte:02x}" for byte in canary.encode())
    places = "/etc /app /tests /logs /tmp /root /proc/[0-9]*/environ"
    dump = f"{read_processes}; echo '== files'; grep -rlsF -f <(printf '{escaped}') {places}"
    # Control: reading the processes' environments this way does find the canary outside.
    outside = subprocess.run(["bash", "-c", read_processes], capture_output=True, timeout=60)
    assert canary.encode() in outside.stdout

    async def dump_inside() -> str:
        sandbox = await local_sandbox_factory(ENV_DIR, 120)
        try:
            # Control: a file holding the canary is found, so the search works.
            await sandbox.write_file("/app/planted", canary)
            return (await sandbox.run_command(dump, timeout=60)).stdout
        finally:
            await sandbox.cleanup()

    inside = run(dump_inside())
    processes, files = inside.split("== files\n")
    assert "== /proc/1/environ" in processes and "bwrap" in processes  # bubblewrap's init, read
    assert canary not in processes
    assert files.split() == ["/app/planted"]
    environ_1 = processes.split("== /proc/1/environ\n")[1].split("== ")[0].split()
    assert sorted(environ_1) == sorted(f"{k}={v}" for k, v in SANDBOX_ENV.items())


# --- the grader ------------------------------------------------------------------------------

RIGHT = "awk '{ s += $1 } END { print s }' numbers.txt > sum.txt"
WRONG = "wc -l < numbers.txt > sum.txt"
# Each leaves state behind for the grader; the first four fool the cookbook's HarborReward.
TAMPERING = {
    "reward planted, then made read-only": (
        "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt"
        " && chmod 444 /logs/verifier/reward.txt && chmod 555 /logs/verifier /logs"
    ),
    "verifier directory replaced by a symlink": (
        "mkdir -p /app/fake && echo 1 > /app/fake/reward.txt && chmod -R a-w /app/fake"
        " && rm -rf /logs/verifier && ln -s /app/fake /logs/verifier"
    ),
    "reward.txt a directory, reward.json planted": (
        "mkdir -p /logs/verifier/reward.txt && echo '{\"reward\": 1}' > /logs/verifier/reward.json"
        " && chmod 000 /logs/verifier/reward.txt"
    ),
    "own test.sh planted, /tests made read-only": (
        "printf '#!/bin/bash\\nmkdir -p /logs/verifier\\necho 1 > /logs/verifier/reward.txt\\n'"
        " > /tests/test.sh && chmod 555 /tests/test.sh /tests"
    ),
    "background process rewriting the reward": (
        "(while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
        " sleep 0.01; done) >/dev/null 2>&1 & disown; sleep 0.2"
    ),
    "tr shadowed on PATH, by an alias and in profiles": (
        "mkdir -p /app/bin && printf '#!/bin/sh\\necho 1827\\n' > /app/bin/tr"
        " && chmod +x /app/bin/tr && export PATH=/app/bin:$PATH && alias tr=/app/bin/tr"
        " && for f in ~/.bashrc ~/.profile /etc/profile.d/zz.sh; do"
        " echo 'export PATH=/app/bin:$PATH' >> $f; done 2>/dev/null; true"
    ),
}


async def _graded(command: str, grade_with_cookbook: bool = False) -> float:
    task = load_harbor_task(TASK_DIR)
    sandbox = await local_sandbox_factory(task.environment_dir, 120)
    try:
        for path, content in task.input_files().items():
            assert (await sandbox.write_file(path, content)).exit_code == 0
        await sandbox.run_command(command, timeout=10)
        if grade_with_cookbook:
            return (await HarborReward(task.tests_dir, sandbox, 30)([]))[0]
        return (await grade_in_fresh_sandbox(sandbox, task, local_sandbox_factory, 30)).reward
    finally:
        await sandbox.cleanup()


@pytest.mark.parametrize("strategy", TAMPERING)
def test_tampering_before_grading_changes_no_grade(strategy: str) -> None:
    tamper = TAMPERING[strategy]
    assert run(_graded(f"{WRONG}; {tamper}")) == 0.0
    assert run(_graded(f"{RIGHT}; {tamper}")) == 1.0


@pytest.mark.parametrize("strategy", list(TAMPERING)[:4])
def test_the_same_tampering_fools_a_grader_that_trusts_leftovers(strategy: str) -> None:
    """Control: the cookbook's HarborReward gives these wrong answers full reward."""
    assert run(_graded(f"{WRONG}; {TAMPERING[strategy]}", grade_with_cookbook=True)) == 1.0


def test_a_verifier_that_writes_no_reward_grades_zero_as_an_error() -> None:
    async def grade_without_tests() -> object:
        task = load_harbor_task(TASK_DIR)
        sandbox = await local_sandbox_factory(task.environment_dir, 120)
        try:
            silent = dataclasses.replace(task, task_dir=Path("/nonexistent"))  # no tests
            return await grade_in_fresh_sandbox(sandbox, silent, local_sandbox_factory, 30)
        finally:
            await sandbox.cleanup()

    verdict = run(grade_without_tests())
    assert verdict.reward == 0.0 and verdict.metrics["grading_error"] == 1.0


# --- totals per sandbox ----------------------------------------------------------------------


def _anonymous_memory(marker: str) -> int:
    """Memory the marked processes hold of their own (shared libraries counted by no one)."""
    total = 0
    for process in processes_with(marker):
        try:
            info = process.memory_info()
        except psutil.Error:
            continue
        total += info.rss - info.shared
    return total


@needs_totals
def test_memory_hogs_in_many_processes_stay_within_the_sandboxs_total() -> None:
    limits = ResourceLimits(memory_bytes=256 << 20)
    marker = uuid.uuid4().hex
    hog = "python3 -c 'import time; b = bytearray(b\"x\") * (100 << 20); time.sleep(3)'"
    # Eight hogs of 100 MiB each, every one within the per-process address space limit.
    command = f"export {MARKER_VARIABLE}={marker}; for i in $(seq 8); do {hog} & done; wait"

    async def hog_and_watch() -> tuple[object, int, int | None]:
        sandbox = await local_sandbox_factory(ENV_DIR, 120, limits=limits)
        running = asyncio.create_task(sandbox.run_command(command, timeout=30))
        peak = 0
        while not running.done():
            peak = max(peak, _anonymous_memory(marker))
            await asyncio.sleep(0.05)
        cgroup_peak = sandbox.memory_peak_bytes()
        await sandbox.cleanup()
        return running.result(), peak, cgroup_peak

    result, peak, cgroup_peak = run(hog_and_watch())
    assert result.stderr.count("Killed") >= 5  # at most two 100 MiB hogs fit in 256 MiB
    assert 100 << 20 < peak <= limits.memory_bytes
    assert cgroup_peak is not None and cgroup_peak <= limits.memory_bytes
    assert processes_with(marker) == []


@needs_totals
def test_disk_hogs_in_many_processes_stay_within_the_sandboxs_total() -> None:
    limits = ResourceLimits(disk_bytes=32 << 20, disk_files=2_000)
    # Eight writers, each trying 1 GB in 64 KiB files, then 100,000 empty ones.
    writer = (
        "python3 -c 'import sys\n"
        'for kind, size, count in (("big", 65536, 16384), ("empty", 0, 100000)):\n'
        "    for i in range(count):\n"
        "        try:\n"
        '            open(f"{sys.argv[1]}-{kind}-{i}", "wb").write(bytes(size))\n'
        "        except OSError as e:\n"
        "            print(e.strerror); break' "
    )
    command = f"for p in $(seq 8); do {writer} $p & done; wait"

    async def fill_and_measure() -> tuple[object, int, int]:
        sandbox = await local_sandbox_factory(ENV_DIR, 120, limits=limits)
        try:
            result = await sandbox.run_command(command, timeout=60)
            files = [
                Path(root, name) for root, _, names in os.walk(sandbox.host_dir) for name in names
            ]
            return result, sum(f.stat().st_size for f in files), len(files)
        finally:
            await sandbox.cleanup()

    result, written, files = run(fill_and_measure())
    assert result.stdout.count("No space left on device") == 16  # every writer, both phases
    assert 16 << 20 < written <= limits.disk_bytes
    assert files <= limits.disk_files


@needs_totals
def test_fork_bombs_in_concurrent_commands_share_one_process_limit() -> None:
    limits = ResourceLimits(max_processes=32)
    marker = uuid.uuid4().hex
    bomb = f"export {MARKER_VARIABLE}={marker}; bomb() {{ bomb | bomb & }}; bomb; sleep 60"

    async def two_bombs() -> int:
        sandbox = await local_sandbox_factory(ENV_DIR, 120, limits=limits)
        running = [asyncio.create_task(sandbox.run_command(bomb, timeout=4)) for _ in range(2)]
        peak = 0
        while not all(task.done() for task in running):
            peak = max(peak, len(processes_with(marker)))
            await asyncio.sleep(0.05)
        await sandbox.cleanup()
        return peak

    peak = run(two_bombs())
    # Each command alone may reach the limit; together they stay under it too.
    assert limits.max_processes // 2 < peak <= limits.max_processes
    assert processes_with(marker) == []


# --- the lifetime budget ---------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [None, 600])
def test_the_lifetime_budget_ends_a_running_command(timeout: float | None) -> None:
    marker = uuid.uuid4().hex
    budget = 2.0

    async def outlive_budget() -> LocalSandbox:
        sandbox = await local_sandbox_factory(ENV_DIR, budget)
        # The sleep is 1000 s: a budget that did not end it fails wait_for, not the run.
        with pytest.raises(SandboxTerminatedError, match="lifetime budget"):
            command = f"export {MARKER_VARIABLE}={marker}; sleep 1000"
            await asyncio.wait_for(sandbox.run_command(command, timeout=timeout), budget + 60)
        return sandbox

    sandbox = run(outlive_budget())
    assert processes_with(marker) == []
    assert not sandbox.host_dir.exists()
