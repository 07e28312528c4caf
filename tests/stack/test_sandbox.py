"""The local sandbox contains what model-written commands do, and the shell-task env grades with it.

(Hostile commands aimed at the host's environment, the grader and the sandbox's totals are
in test_sandbox_hostile.py.)
"""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import pickle
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from sandbox_probes import (
    ENV_DIR,
    MARKER_VARIABLE,
    TASK_DIR,
    create_and_run_pwd,
    processes_with,
    run,
)
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.rl.rollouts import do_group_rollout
from tinker_cookbook.sandbox.sandbox_interface import SandboxInterface, SandboxTerminatedError

from helpers.scoring import graded_text
from kimi import (
    MODEL_NAME,
    RENDERER_NAME,
    offline_kimi_tokenizer,
    register_offline_kimi_tokenizer,
)
from local_stack.client.sailbox import (
    LocalSandbox,
    ResourceLimits,
    SandboxUnavailableError,
    isolation,
    local_sandbox_factory,
)
from local_stack.client.sailbox.enclosure import totals_problem
from local_stack.client.sailbox.process import OUTPUT_CEILING_BYTES
from shell_tasks.harbor_task import load_harbor_task
from shell_tasks.shell_env import (
    ShellTaskGroupBuilder,
    bash_script,
    completion_text,
    extract_bash_script,
)
from tests.replies_support import Replies

# Hangs only: whether a command was killed at its timeout is `metrics["timed_out"]`.
SLACK_SECONDS = 30.0


def assert_machine_unaffected(available_before: int) -> None:
    assert subprocess.run(["true"], timeout=5).returncode == 0
    assert psutil.virtual_memory().available > available_before // 2


@dataclass(frozen=True)
class Contained:
    """What a contained command did; small, because a 64 MiB SandboxResult is slow to repr."""

    exit_code: int
    stdout_head: str
    stdout_length: int
    stderr: str
    metrics: dict[str, object]


async def run_contained(
    command: str,
    *,
    timeout: float,
    limits: ResourceLimits | None = None,
    marker: str | None = None,
) -> Contained:
    """Run a marked `command` in a fresh sandbox, then check that nothing of it is left."""
    marker = marker or uuid.uuid4().hex
    available_before = psutil.virtual_memory().available
    sandbox = await local_sandbox_factory(ENV_DIR, 120, limits=limits or ResourceLimits())
    # A sandbox that ignored its timeout would hang here: wait_for fails the test instead.
    result = await asyncio.wait_for(
        sandbox.run_command(f"export {MARKER_VARIABLE}={marker}; {command}", timeout=timeout),
        timeout + SLACK_SECONDS,
    )
    await sandbox.cleanup()
    assert processes_with(marker) == []
    assert not sandbox.host_dir.exists()
    assert_machine_unaffected(available_before)
    return Contained(
        exit_code=result.exit_code,
        stdout_head=result.stdout[:4096],
        stdout_length=len(result.stdout),
        stderr=result.stderr,
        metrics=result.metrics,
    )


# --- containment ---------------------------------------------------------------------------


def test_an_infinite_loop_is_killed_at_its_timeout() -> None:
    ran = run(run_contained("while :; do :; done", timeout=2))
    assert ran.exit_code == 124 and ran.metrics["timed_out"]


def test_a_fork_bomb_stalls_at_the_process_limit_and_dies_at_its_timeout() -> None:
    limits = ResourceLimits(max_processes=32)
    marker = uuid.uuid4().hex
    bomb = "bomb() { bomb | bomb & }; bomb; sleep 60"

    async def bomb_and_count() -> tuple[Contained, int]:
        contained = asyncio.create_task(
            run_contained(bomb, timeout=3, limits=limits, marker=marker)
        )
        peak = 0
        while not contained.done():
            peak = max(peak, len(processes_with(marker)))
            await asyncio.sleep(0.05)
        return contained.result(), peak

    ran, peak = run(bomb_and_count())
    assert ran.metrics["timed_out"]
    assert 1 < peak <= limits.max_processes + 1  # + bubblewrap's own process outside


def test_a_gigabyte_of_output_is_capped_without_stalling() -> None:
    # The timeout only bounds a stall (a full pipe nobody drains hangs forever); a loaded machine
    # needs well over 10 s to push a gigabyte through.
    ran = run(run_contained("head -c 1000000000 /dev/zero", timeout=180))
    # The whole gigabyte was drained (the command finished); only Sail's 64 MiB ceiling is kept.
    assert ran.exit_code == 0 and ran.metrics["stdout_truncated"]
    assert ran.stdout_length == OUTPUT_CEILING_BYTES


def test_max_output_bytes_keeps_the_head_of_each_stream() -> None:
    async def capped() -> object:
        sandbox = await local_sandbox_factory(ENV_DIR)
        try:
            return await sandbox.run_command(
                "yes x | head -c 10000000; echo oops >&2",
                max_output_bytes=1000,
                timeout=20,
            )
        finally:
            await sandbox.cleanup()

    result = run(capped())
    assert result.stdout == "x\n" * 500 and result.metrics["stdout_truncated"]
    assert result.stderr == "oops\n" and not result.metrics["stderr_truncated"]


@pytest.fixture
def loopback_server() -> tuple[int, list[tuple[str, int]]]:
    """A TCP server on the host's 127.0.0.1 that records every connection it accepts."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    accepted: list[tuple[str, int]] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer)
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], accepted
    stop.set()
    thread.join()
    server.close()


def test_the_network_namespace_blocks_the_hosts_loopback(loopback_server) -> None:
    port, accepted = loopback_server
    connect = f"echo hello > /dev/tcp/127.0.0.1/{port}"
    # Control: the same command outside the sandbox does reach the server.
    assert subprocess.run(["bash", "-c", connect], timeout=5).returncode == 0
    deadline = time.monotonic() + 30  # hangs only: the connection is usually in at once
    while not accepted and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(accepted) == 1

    ran = run(run_contained(connect, timeout=5))
    assert ran.exit_code != 0 and "refused" in ran.stderr
    time.sleep(0.3)
    assert len(accepted) == 1


def test_writes_outside_the_working_directory_fail() -> None:
    name = f"escape-{uuid.uuid4().hex}"
    targets = [f"/tmp/{name}", f"/etc/{name}", f"/{name}", f"/usr/{name}"]
    writes = "; ".join(f"echo x > {target} && echo WROTE {target}" for target in targets)
    # Root's HOME is writable, as on a Sailbox, but it is the sandbox's own, not the host's.
    inside = f"echo inside > {name}; echo home > /root/{name}"

    async def write_everywhere() -> tuple[object, list[str]]:
        sandbox = await local_sandbox_factory(ENV_DIR)
        try:
            result = await sandbox.run_command(f"{writes}; {inside}")
            written = [(sandbox.host_dir / d / name).read_text() for d in ("app", "root")]
            return result, written
        finally:
            await sandbox.cleanup()

    result, written = run(write_everywhere())
    assert "WROTE" not in result.stdout
    assert result.stderr.count("Read-only file system") == len(targets)
    assert written == ["inside\n", "home\n"]
    assert not any(Path(target).exists() for target in [*targets, f"/root/{name}"])


def test_a_background_process_does_not_survive() -> None:
    ran = run(run_contained("sleep 1000 & disown; kill -0 $! && echo started", timeout=10))
    # The command returns when its shell exits, not when the sleep would (at its timeout).
    assert ran.stdout_head == "started\n" and ran.exit_code == 0
    assert not ran.metrics.get("timed_out")


def test_memory_and_file_size_limits_apply() -> None:
    limits = ResourceLimits(address_space_bytes=512 << 20, file_size_bytes=1 << 20)
    memory = run(run_contained("python3 -c 'bytearray(1 << 30)'", timeout=10, limits=limits))
    assert memory.exit_code != 0 and "MemoryError" in memory.stderr
    size = run(
        run_contained("head -c 2000000 /dev/zero > big; wc -c < big", timeout=10, limits=limits)
    )
    assert size.stdout_head.strip() == str(1 << 20)


def test_cleanup_kills_a_running_command_and_ends_the_sandbox() -> None:
    marker = uuid.uuid4().hex

    async def cleanup_midway() -> tuple[object, LocalSandbox]:
        sandbox = await local_sandbox_factory(ENV_DIR)
        running = asyncio.create_task(
            sandbox.run_command(f"export {MARKER_VARIABLE}={marker}; sleep 1000", timeout=60)
        )
        while not processes_with(marker):
            await asyncio.sleep(0.02)
        await sandbox.cleanup()
        result = await asyncio.wait_for(running, 5)
        with pytest.raises(SandboxTerminatedError):
            await sandbox.run_command("true")
        return result, sandbox

    result, sandbox = run(cleanup_midway())
    assert result.exit_code != 0
    assert processes_with(marker) == []
    assert not sandbox.host_dir.exists()


def test_killing_commands_as_they_start_leaves_nothing() -> None:
    """bubblewrap's own --die-with-parent is armed late; a kill before then must not leak."""
    markers = [uuid.uuid4().hex for _ in range(30)]

    async def kill_early(marker: str, delay: float) -> None:
        sandbox = await local_sandbox_factory(ENV_DIR)
        running = asyncio.create_task(
            sandbox.run_command(f"export {MARKER_VARIABLE}={marker}; sleep 1000", timeout=60)
        )
        await asyncio.sleep(delay)
        await sandbox.cleanup()
        await asyncio.wait_for(running, 10)

    async def kill_all() -> None:
        for index, marker in enumerate(markers):
            await kill_early(marker, delay=(index % 6) * 0.002)

    run(kill_all())
    assert [p for marker in markers for p in processes_with(marker)] == []


# --- the interface ----------------------------------------------------------------------------


def test_files_round_trip_through_the_sandbox() -> None:
    async def round_trip() -> tuple[object, ...]:
        sandbox = await local_sandbox_factory(ENV_DIR)
        try:
            assert isinstance(sandbox, SandboxInterface)
            written = await sandbox.write_file("/app/bin/hello.sh", "echo hi\n", executable=True)
            ran = await sandbox.run_command("bin/hello.sh")
            head = await sandbox.read_file("/app/bin/hello.sh", max_bytes=4)
            missing = await sandbox.read_file("/app/nothing")
            return written, ran, head, missing
        finally:
            await sandbox.cleanup()

    written, ran, head, missing = run(round_trip())
    assert written.exit_code == 0
    assert (ran.stdout, ran.exit_code) == ("hi\n", 0)
    assert (head.stdout, head.metrics["truncated"]) == ("echo", True)
    assert missing.exit_code == 1 and "No such file" in missing.stderr


def test_the_lifetime_budget_terminates_the_sandbox() -> None:
    async def outlive_budget() -> LocalSandbox:
        sandbox = await local_sandbox_factory(ENV_DIR, 0.5)
        assert (await sandbox.run_command("echo alive")).stdout == "alive\n"
        await asyncio.sleep(0.6)
        with pytest.raises(SandboxTerminatedError, match="lifetime budget"):
            await sandbox.run_command("echo too late")
        with pytest.raises(SandboxTerminatedError):
            await sandbox.send_heartbeat()
        return sandbox

    sandbox = run(outlive_budget())
    assert not sandbox.host_dir.exists()


def test_a_preset_factory_pickles_and_works_in_a_spawned_process() -> None:
    factory = functools.partial(local_sandbox_factory, limits=ResourceLimits(cpu_seconds=5))
    assert pickle.loads(pickle.dumps(factory)).keywords == factory.keywords
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        assert pool.apply(create_and_run_pwd, (factory,)) == "/app"


def test_the_sandbox_refuses_to_start_without_isolation(monkeypatch) -> None:
    monkeypatch.setattr(isolation, "isolation_problem", lambda: "user namespaces are disabled")
    with pytest.raises(SandboxUnavailableError) as raised:
        run(local_sandbox_factory(ENV_DIR))
    message = str(raised.value)
    assert message.startswith("Refusing to start the local sandbox")
    assert message.endswith("user namespaces are disabled.") and message.count(". ") == 0


def test_macos_is_told_it_needs_linux(monkeypatch) -> None:
    isolation.isolation_problem.cache_clear()
    monkeypatch.setattr(isolation.sys, "platform", "darwin")
    try:
        assert isolation.isolation_problem() == (
            "it needs Linux (bubblewrap and user namespaces), and this is macOS"
        )
    finally:
        isolation.isolation_problem.cache_clear()


def test_a_missing_bubblewrap_is_detected(monkeypatch) -> None:
    isolation.isolation_problem.cache_clear()
    monkeypatch.setattr(isolation.shutil, "which", lambda _: None)
    try:
        assert "apt-get install bubblewrap" in isolation.isolation_problem()
    finally:
        isolation.isolation_problem.cache_clear()


# --- the task and the env ----------------------------------------------------------------------


def test_the_task_loads_and_its_verifier_matches_its_input() -> None:
    task = load_harbor_task(TASK_DIR)
    assert task.workdir == "/app"
    assert task.config["environment"]["docker_image"] == "python:3.11-slim-bookworm"
    numbers = task.input_files()["/app/numbers.txt"].decode().split()
    assert f"EXPECTED_SUM={sum(map(int, numbers))}\n" in (task.tests_dir / "test.sh").read_text()


def test_extract_bash_script_takes_the_first_bash_block() -> None:
    text = "plan\n```python\nprint(1)\n```\n```bash\necho a\n```\n```sh\necho b\n```"
    assert extract_bash_script(text) == "echo a\n"
    assert extract_bash_script("echo a") is None


def test_the_script_rule_is_notebook_01s_grader_rule_then_the_first_bash_block() -> None:
    """`bash_script` (the learner's exercise in notebook 08) on a completion's text agrees
    with the token-level rule the math environment grades by."""
    register_offline_kimi_tokenizer()
    renderer = get_renderer(RENDERER_NAME, offline_kimi_tokenizer())
    block = "```bash\necho 1 > sum.txt\n```"
    completions = {
        f"Sum.</think>{block}<|im_end|>": "echo 1 > sum.txt\n",  # an answer
        f"Sum.</think>{block}": None,  # cut off: no stop token
        f"Still thinking {block}<|im_end|>": None,  # never closed its thinking
        f"</think>{block}<think>again<|im_end|>": None,  # thinking again after the answer
        "</think>No block.<|im_end|>": None,
    }
    for text, script in completions.items():
        tokens = offline_kimi_tokenizer().encode(text)
        answer = graded_text(renderer, tokens)
        assert (None if answer is None else extract_bash_script(answer)) == script, text
        assert bash_script(*completion_text(renderer, tokens)) == script, text


CORRECT = (
    "Add them with awk.</think>```bash\n"
    "awk '{ s += $1 } END { print s }' numbers.txt > sum.txt\n```<|im_end|>"
)
WRONG = "Count them.</think>```bash\nwc -l < numbers.txt > sum.txt\n```<|im_end|>"


@pytest.mark.parametrize("creation", ["sequential", "concurrent"])
def test_a_rollout_group_is_graded_by_test_sh_in_the_sandbox(creation: str) -> None:
    register_offline_kimi_tokenizer()
    created: list[SandboxInterface] = []

    async def recording_factory(env_dir: Path, timeout: int) -> SandboxInterface:
        sandbox = await local_sandbox_factory(env_dir, timeout)
        created.append(sandbox)
        return sandbox

    builder = ShellTaskGroupBuilder(
        task_dir=TASK_DIR,
        sandbox_factory=recording_factory,
        group_size=2,
        model_name=MODEL_NAME,
        renderer_name=RENDERER_NAME,
        sandbox_creation=creation,
    )
    group = run(do_group_rollout(builder, Replies([CORRECT, WRONG])))

    correct_tokens = offline_kimi_tokenizer().encode(CORRECT)
    rewards = {
        trajectory.transitions[0].ac.tokens == correct_tokens: reward
        for trajectory, reward in zip(group.trajectories_G, group.get_total_rewards(), strict=True)
    }
    assert rewards == {True: 1.0, False: 0.0}
    assert all(t.transitions[0].metrics["has_bash_block"] == 1.0 for t in group.trajectories_G)
    # Two for the rollouts and one more for grading each, all cleaned up.
    assert len(created) == 4 and not any(s.host_dir.exists() for s in created)


CREATING: list[int] = [0, 0]  # sandboxes being created right now, and the most at once


async def counting_factory(env_dir: str | Path, timeout_seconds: float | None = None, **kwargs):
    """`local_sandbox_factory`, counting how many creations overlap."""
    CREATING[0] += 1
    CREATING[1] = max(CREATING[1], CREATING[0])
    try:
        return await local_sandbox_factory(env_dir, timeout_seconds, **kwargs)
    finally:
        CREATING[0] -= 1


def test_sequential_creation_pays_every_boot_and_concurrent_creation_overlaps_them() -> None:
    """Sequential: four boots, one after another. Concurrent: all four boots at once. (How much
    time that saves: `python -m bench.sandbox`.)"""
    register_offline_kimi_tokenizer()
    boot = 0.3

    async def make_envs(creation: str) -> tuple[int, int]:
        builder = ShellTaskGroupBuilder(
            task_dir=TASK_DIR,
            sandbox_factory=functools.partial(counting_factory, startup_latency_seconds=boot),
            group_size=4,
            model_name=MODEL_NAME,
            renderer_name=RENDERER_NAME,
            sandbox_creation=creation,
        )
        builder = pickle.loads(pickle.dumps(builder))  # as a rollout worker would receive it
        CREATING[:] = [0, 0]
        envs = await builder.make_envs()
        await builder.cleanup()
        assert not any(env.sandbox.host_dir.exists() for env in envs)
        return len(envs), CREATING[1]  # sandboxes made, and the most booting at once

    assert run(make_envs("sequential")) == (4, 1)
    assert run(make_envs("concurrent")) == (4, 4)


def test_without_root_the_totals_give_way_to_per_process_limits_with_a_warning(
    monkeypatch, caplog
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # as an ordinary user sees it
    totals_problem.cache_clear()

    async def as_a_user() -> tuple[object, LocalSandbox]:
        sandbox = await local_sandbox_factory(ENV_DIR, 60)
        try:
            return await sandbox.run_command("echo hi > x && cat x"), sandbox
        finally:
            await sandbox.cleanup()

    try:
        with caplog.at_level(logging.WARNING):
            result, sandbox = run(as_a_user())
    finally:
        totals_problem.cache_clear()
    assert result.stdout == "hi\n"
    assert not sandbox.totals_enforced and sandbox.memory_peak_bytes() is None
    assert "not each sandbox as a whole: the training process is not root" in caplog.text
    assert not sandbox.host_dir.exists()


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "1G"])
def test_a_limit_must_be_a_positive_integer(value: object) -> None:
    with pytest.raises(ValueError, match=r"^ResourceLimits.memory_bytes must be an integer >= 1"):
        ResourceLimits(memory_bytes=value)
