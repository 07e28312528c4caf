"""Sandboxed RL on the local stack, measured: `python -m bench.sandboxed_rl`.

(a) One sandboxed rollout's overhead, beside the model: create a local sandbox for a task of
    the shell family, upload its input, run a right command, grade it in a fresh sandbox
    (`grade_in_fresh_sandbox`, which creates and cleans up its own), clean up; each part's
    median over a few rollouts.
(b) One RL step of 8 groups x 8 rollouts, the same `helpers.training.run_step` on shell tasks
    (the tiny shell model, every rollout in its own sandbox) and on notebook 04's arithmetic
    problems, both through the real SDKs on the local stack; medians of a few steps each, and
    their ratio (issue 29's target: about 2x or less).
"""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

STEP_PARTS = ("save_s", "sample_s", "train_s")
TIMED_STEPS = 3
ROLLOUTS = 8
GROUPS_PER_STEP = 8
GROUP_SIZE = 8


async def rollout_overhead(tasks_root: Path) -> dict[str, float]:
    """Median seconds of each part of one sandboxed rollout, the model left out."""
    from shell_tasks import task_family
    from shell_tasks.harbor_task import grade_in_fresh_sandbox, load_harbor_task
    from shell_tasks.sandboxes import sandbox_factory
    from shell_tasks.shell_env import upload_task_inputs

    factory = sandbox_factory("local")
    parts: dict[str, list[float]] = {"create": [], "run": [], "grade": [], "clean_up": []}
    for index in range(ROLLOUTS + 1):  # the first warms up the isolation probe
        item = task_family.instance("train", index)
        task = load_harbor_task(task_family.write_task(item, tasks_root))
        started = time.perf_counter()
        sandbox = await factory(task.environment_dir, 600)
        await upload_task_inputs(sandbox, task)
        created = time.perf_counter()
        await sandbox.run_command(
            f"echo {item.expected} > {item.output_name}", workdir=task.workdir
        )
        ran = time.perf_counter()
        verdict = await grade_in_fresh_sandbox(sandbox, task, factory, 30)
        graded = time.perf_counter()
        await sandbox.cleanup()
        cleaned = time.perf_counter()
        assert verdict.reward == 1.0, verdict.output
        if index:
            for part, seconds in zip(
                parts,
                (created - started, ran - created, graded - ran, cleaned - graded),
                strict=True,
            ):
                parts[part].append(seconds)
    return {part: statistics.median(values) for part, values in parts.items()}


async def step_times(tasks_root: Path) -> dict[str, dict[str, float]]:
    """Median save/sample/train seconds of TIMED_STEPS steps of each loop (after a warm-up)."""
    import helpers
    from helpers.scoring import MathGroupBuilder
    from helpers.training import LoopSettings, run_step
    from shell_tasks import task_family
    from shell_tasks.sandboxes import sandbox_factory
    from shell_tasks.shell_rl import group_builders, shell_course

    arithmetic = helpers.connect("local")
    shell = shell_course(arithmetic)
    factory = sandbox_factory("local")
    rng = random.Random(0)
    timings: dict[str, dict[str, float]] = {}
    for name, course in (("arithmetic", arithmetic), ("sandboxed shell", shell)):
        training_client = await course.service_client.create_lora_training_client_async(
            base_model=course.model_name, rank=course.adapter_config["r"], seed=0
        )
        max_tokens = 24 if course is arithmetic else 40
        settings = LoopSettings(f"bench-{name[:5]}", GROUP_SIZE, 1e-3, max_tokens, 1.0, "balanced")
        records = []
        for step in range(TIMED_STEPS + 1):
            if course is arithmetic:
                rows = rng.sample(course.train_rows, GROUPS_PER_STEP)
                builders = [MathGroupBuilder(row, course.renderer, GROUP_SIZE) for row in rows]
            else:
                items = [
                    task_family.instance("train", rng.randrange(100_000))
                    for _ in range(GROUPS_PER_STEP)
                ]
                task_dirs = [task_family.write_task(item, tasks_root) for item in items]
                builders = group_builders(task_dirs, factory, GROUP_SIZE, course.model_name)
            record, _ = await run_step(step, builders, settings, training_client, course)
            records.append(record)
        timed = records[1:]  # the first loads the new base model and adapter shapes
        timings[name] = {part: statistics.median(r[part] for r in timed) for part in STEP_PARTS}
    return timings


async def run() -> None:
    from local_stack.client.supervisor import start_local_stack, stop_local_stack
    from shell_tasks.sandboxes import sandbox_problem

    if (problem := sandbox_problem("local")) is not None:
        print(f"skipped: no local sandbox on this machine ({problem})")
        return
    tasks_root = Path(tempfile.mkdtemp(prefix="bench-shell-tasks-"))
    overhead = await rollout_overhead(tasks_root)
    print(
        f"(a) one sandboxed rollout, median of {ROLLOUTS}: "
        + " | ".join(f"{part} {seconds * 1000:.0f} ms" for part, seconds in overhead.items())
        + f" | total {sum(overhead.values()) * 1000:.0f} ms"
    )
    start_local_stack()
    try:
        timings = await step_times(tasks_root)
    finally:
        stop_local_stack()
    totals = {name: sum(parts.values()) for name, parts in timings.items()}
    for name, parts in timings.items():
        print(
            f"(b) {name} step ({GROUPS_PER_STEP} groups x {GROUP_SIZE}, median of {TIMED_STEPS}): "
            + " | ".join(f"{part[:-2]} {seconds:.2f} s" for part, seconds in parts.items())
            + f" | total {totals[name]:.2f} s"
        )
    ratio = totals["sandboxed shell"] / totals["arithmetic"]
    print(
        f"    sandboxed step / arithmetic step: {ratio:.2f}x (target about 2x or less); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )


def main() -> None:
    # A benchmark's checkpoints are throwaway: keep them out of the course's storage.
    os.environ["COURSE_LOCAL_STACK_DIR"] = tempfile.mkdtemp(prefix="bench-sandboxed-rl-")
    asyncio.run(run())


if __name__ == "__main__":
    main()
