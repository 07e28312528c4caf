"""Benchmark the local sandbox: `python -m bench.sandbox`.

Prints the time to create a group of 8 sandboxes one after another (what cookbook 0.5.8's
`HarborEnvGroupBuilder.make_envs` does) and all at once, both as they are locally and with
a simulated boot time standing in for a Sailbox's, and what isolation adds to one command
(namespaces, the sandbox's own uid and, as root, joining its memory cgroup; creating a
sandbox as root also mounts its tmpfs and creates that cgroup).
"""

from __future__ import annotations

import asyncio
import functools
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from local_stack.client.sailbox import LocalSandbox, local_sandbox_factory

GROUP_SIZE = 8
SIMULATED_BOOT_SECONDS = 0.5
COMMAND_REPEATS = 30
ENV_DIR = Path(__file__).resolve().parents[1] / "tasks" / "sum_numbers" / "environment"

Factory = Callable[[Path, int], Awaitable[LocalSandbox]]


async def _create_group(factory: Factory, *, concurrently: bool) -> float:
    started = time.perf_counter()
    if concurrently:
        sandboxes = await asyncio.gather(*(factory(ENV_DIR, 600) for _ in range(GROUP_SIZE)))
    else:
        sandboxes = [await factory(ENV_DIR, 600) for _ in range(GROUP_SIZE)]
    elapsed = time.perf_counter() - started
    await asyncio.gather(*(sandbox.cleanup() for sandbox in sandboxes))
    return elapsed


async def _median_seconds(run_once: Callable[[], Awaitable[object]]) -> float:
    await run_once()  # warm-up
    timings = []
    for _ in range(COMMAND_REPEATS):
        started = time.perf_counter()
        await run_once()
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


async def _unsandboxed_true() -> None:
    process = await asyncio.create_subprocess_exec("true")
    await process.wait()


async def run() -> None:
    await (await local_sandbox_factory(ENV_DIR)).cleanup()  # warm-up: the one-off isolation probe
    simulated: Factory = functools.partial(
        local_sandbox_factory, startup_latency_seconds=SIMULATED_BOOT_SECONDS
    )
    for label, factory in (
        ("local", local_sandbox_factory),
        (f"{SIMULATED_BOOT_SECONDS:.1f} s simulated boot", simulated),
    ):
        one_by_one = await _create_group(factory, concurrently=False)
        at_once = await _create_group(factory, concurrently=True)
        print(
            f"create {GROUP_SIZE} sandboxes ({label}): one after another"
            f" {one_by_one * 1000:.0f} ms, all at once {at_once * 1000:.0f} ms"
            f" ({one_by_one / at_once:.1f}x)"
        )

    sandbox = await local_sandbox_factory(ENV_DIR, 600)
    try:
        sandboxed = await _median_seconds(lambda: sandbox.run_command("true"))
    finally:
        await sandbox.cleanup()
    plain = await _median_seconds(_unsandboxed_true)
    print(
        f"one command (`true`, median of {COMMAND_REPEATS}): sandboxed"
        f" {sandboxed * 1000:.1f} ms, plain subprocess {plain * 1000:.1f} ms,"
        f" isolation adds {(sandboxed - plain) * 1000:.1f} ms"
    )


if __name__ == "__main__":
    asyncio.run(run())
