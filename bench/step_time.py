"""An RL step of the current base model beside one of the model before its rebuild.

`python -m bench.step_time` (part of `make bench`). Issue 26 rebuilt the tiny base model (same
architecture, new weights) so that it knows more than it says; the rebuild must not make a
step slower. The model before it is the one at commit OLD_COMMIT: its tree comes from git
(`git archive`, into a temporary folder), and the same driver runs in both trees, alternately,
ROUNDS times each: its own local stack, a fresh LoRA client, one warm-up step, then
TIMED_STEPS timed steps of notebook 04's loop at its local defaults (`run_step`, 8 groups x 8
rollouts) from the untrained adapter, on the same training problems. Printed: each model's
median step time (save + sample + train) and CPU seconds per step, with the load average,
since on a shared machine wall time also counts the wait for a core.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OLD_COMMIT = "14d65dd"  # the last commit whose base model predates issue 26's rebuild
ROUNDS = 2  # runs per model, interleaved, so a change in machine load hits both alike
RESULT = "STEP_TIMES "

# Runs with the tree under test first on sys.path; it uses only what both trees share.
DRIVER = r"""
import asyncio, inspect, json, random, statistics, sys, time
import psutil
import helpers
from helpers.notebook_parameters import resolve
from helpers.training import run_step
import os
# The old tree's run_step takes the step's problems and returns the record; today's takes
# the problems' group builders and returns the record with the groups.
TAKES_BUILDERS = "builders" in inspect.signature(run_step).parameters
if TAKES_BUILDERS:
    from helpers.scoring import MathGroupBuilder
# The old tree predates local_stack/client/. Chosen by the tree's own files: an import that
# fails there would be answered from the installed (current) checkout instead.
if os.path.exists("local_stack/client/supervisor.py"):
    from local_stack.client.supervisor import start_local_stack, stop_local_stack
else:
    from local_stack.supervisor import start_local_stack, stop_local_stack

WARM_UP, TIMED = 1, int(sys.argv[1])
PARTS = ("save_s", "sample_s", "train_s")


async def main():
    stack = start_local_stack()
    try:
        course = helpers.connect("local")
        client = await course.service_client.create_lora_training_client_async(
            base_model=course.model_name, rank=course.adapter_config["r"], seed=0
        )
        settings = resolve("04_training_loop", run_name="step-time")  # its local defaults
        processes = [psutil.Process(stack.pid), psutil.Process()]
        rng, totals, cpu = random.Random(0), [], []
        for step in range(WARM_UP + TIMED):
            rows = rng.sample(course.train_rows, settings.groups_per_step)
            cpu_before = sum(sum(p.cpu_times()[:2]) for p in processes)
            if TAKES_BUILDERS:
                builders = [MathGroupBuilder(row, course.renderer, 8) for row in rows]
                record, _ = await run_step(step, builders, settings, client, course)
            else:
                record = await run_step(step, rows, settings, client, course)
            if step >= WARM_UP:
                totals.append(sum(record[part] for part in PARTS))
                cpu.append(sum(sum(p.cpu_times()[:2]) for p in processes) - cpu_before)
    finally:
        stop_local_stack()
    print("STEP_TIMES " + json.dumps({"wall": totals, "cpu": cpu}))


asyncio.run(main())
"""
TIMED_STEPS = 5


def old_tree(into: Path) -> Path | str:
    """The repository as of OLD_COMMIT, extracted into `into`; or why it cannot be."""
    archive = into / "old.tar"
    made = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--output", str(archive), OLD_COMMIT],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        return f"git archive {OLD_COMMIT} failed ({made.stderr.strip()[:200]})"
    tree = into / "old"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def measure(tree: Path, scratch: Path) -> dict[str, list[float]]:
    """Step times of the model in `tree`, from a driver run with that tree's code."""
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "COURSE_RUNS_DIR": tempfile.mkdtemp(dir=scratch),
        "COURSE_LOCAL_STACK_DIR": tempfile.mkdtemp(dir=scratch),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, str(TIMED_STEPS)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the step-time driver failed in {tree}: {done.stderr[-2000:]}")
    return json.loads(lines[-1].removeprefix(RESULT))


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-step-time-") as folder:
        scratch = Path(folder)
        old = old_tree(scratch)
        trees = {f"before the rebuild ({OLD_COMMIT})": old, "current": ROOT}
        if isinstance(old, str):
            print(f"the old model is not measured: {old}")
            trees = {"current": ROOT}
        times: dict[str, dict[str, list[float]]] = {n: {"wall": [], "cpu": []} for n in trees}
        loads = []
        for _ in range(ROUNDS):
            for name, tree in trees.items():
                measured = measure(tree, scratch)
                loads.append(os.getloadavg()[0])
                for key in ("wall", "cpu"):
                    times[name][key] += measured[key]
    print(
        f"one local RL step of the base model (8 groups x 8 rollouts, untrained adapter; median "
        f"of {ROUNDS} runs x {TIMED_STEPS} steps each, runs alternating):"
    )
    for name, measured in times.items():
        print(
            f"    {name:<32} {statistics.median(measured['wall']):.2f} s a step "
            f"(CPU {statistics.median(measured['cpu']):.2f} s: stack and driver)"
        )
    print(
        f"    load average {min(loads):.1f} to {max(loads):.1f} on {os.cpu_count()} cores "
        "while measuring (wall time grows with it; CPU seconds much less)"
    )


if __name__ == "__main__":
    main()
