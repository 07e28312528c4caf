"""RL on the local stack, measured: `python -m bench.rl`.

It runs the course's own loop, `helpers.training` (built from notebook 04): `run_step` for
every step, and `evaluate_now` and `compare` for the held-out sets, through the real
tinker, sail and tinker-cookbook SDKs on `helpers.connect("local")`.
(a) Learning is real: the loop trains on the arithmetic set's train split for a fixed number
    of steps, and notebook 04's three held-out sets are scored before and after, with the
    local Sail sampler seeded: known facts (operand pairs the base model's warm-up saw and
    RL never trains on), unseen facts (operand pairs nothing ever shows the model) and seen
    facts in a wording training never shows. Each gain comes with the course's paired
    bootstrap interval, and format rate and accuracy given format are shown separately,
    so a gain from format alone is visible.
(b) One local RL step's time, as `run_step` splits it: save (sampler checkpoint and signed
    URL), sample (rollouts and scoring; Sail loads the new adapter on the first request) and
    train (forward_backward + optim_step); and the CPU seconds the step cost the stack and
    this process, with the load average: on a shared machine, wall time also counts the
    time spent waiting for a core.

Its defaults are notebook 04's on the local backend (`helpers.notebook_parameters.resolve`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass

import psutil

from helpers.notebook_parameters import resolve
from local_stack.client.control_client import set_knobs

STEP_PARTS = ("save_s", "sample_s", "train_s")  # run_step's timings, in the order they run
TIMED_STEPS = 5


LOCAL = resolve("04_training_loop")  # its local defaults


@dataclass(frozen=True)
class Hyperparams:
    """What the loop runs with; by default, notebook 04's local settings."""

    group_size: int = LOCAL.group_size
    groups_per_step: int = LOCAL.groups_per_step
    learning_rate: float = LOCAL.learning_rate
    steps: int = LOCAL.steps
    temperature: float = LOCAL.temperature
    max_tokens: int = LOCAL.max_tokens  # a well-formed answer takes at most 18 tokens


def score_line(name: str, before: dict, after: dict, comparison: dict) -> str:
    reward = comparison["reward"]
    low, high = reward["gain_interval"]
    rates = "; ".join(
        f"{score} {comparison[score]['before']:.3f} -> {comparison[score]['after']:.3f}"
        for score in ("correct", "format", "correct_given_format")
    )
    return (
        f"    {name} (n={before['samples']} -> {after['samples']}): reward "
        f"{reward['before']:+.3f} -> {reward['after']:+.3f}, gain {reward['gain']:+.3f} "
        f"(95% interval {low:+.3f} to {high:+.3f}); {rates}"
    )


class CpuClock:
    """CPU seconds (user + system) used so far by the stack's process and by this one."""

    def __init__(self, stack_pid: int) -> None:
        self.processes = {"stack": psutil.Process(stack_pid), "bench": psutil.Process()}

    def read(self) -> dict[str, float]:
        return {name: sum(p.cpu_times()[:2]) for name, p in self.processes.items()}


async def run(hp: Hyperparams, eval_samples_per_problem: int, seed: int, budget: float) -> None:
    import helpers
    from helpers.scoring import MathGroupBuilder
    from helpers.training import LoopSettings, compare, evaluate_now, run_step
    from local_stack.client.supervisor import start_local_stack, stop_local_stack

    started = time.perf_counter()
    stack = start_local_stack()
    print(f"local stack up in {time.perf_counter() - started:.1f} s at {stack.url}")
    try:
        course = helpers.connect("local")  # reuses the stack started above
        training_client = await course.service_client.create_lora_training_client_async(
            base_model=course.model_name, rank=course.adapter_config["r"], seed=seed
        )
        settings = LoopSettings(
            run_name="bench",
            group_size=hp.group_size,
            learning_rate=hp.learning_rate,
            max_tokens=hp.max_tokens,
            temperature=hp.temperature,
            completion_window="balanced",
        )
        held_out_sets = {
            "known facts, not trained": course.held_out_known_rows,
            "unseen facts": course.held_out_rows,
            "seen facts, new wording": course.held_out_seen_rows,
        }
        rng = random.Random(seed)

        async def held_out_now(name: str) -> dict[str, dict]:
            set_knobs(stack.url, seed=seed)  # the same sampler stream before and after
            return await evaluate_now(
                name, held_out_sets, settings, eval_samples_per_problem, training_client, course
            )

        before = await held_out_now("bench-before")
        loop_started, steps, last = time.perf_counter(), 0, 0.0
        # The budget only guards against a machine so slow the run would not end; the
        # learning figures are comparable between runs only when all the steps ran.
        while steps < hp.steps and time.perf_counter() - loop_started + last <= budget:
            rows = rng.sample(course.train_rows, hp.groups_per_step)
            builders = [MathGroupBuilder(row, course.renderer, hp.group_size) for row in rows]
            record, _ = await run_step(steps, builders, settings, training_client, course)
            last = sum(record[part] for part in STEP_PARTS)
            print(f"step {steps:3d} | reward {record['reward']:+.3f} | {last:.2f} s")
            steps += 1
        training_seconds = time.perf_counter() - loop_started
        after = await held_out_now("bench-after")

        clock, timed, cpu = CpuClock(stack.pid), [], []
        for step in range(steps, steps + TIMED_STEPS):
            rows = rng.sample(course.train_rows, hp.groups_per_step)
            builders = [MathGroupBuilder(row, course.renderer, hp.group_size) for row in rows]
            cpu_before = clock.read()
            record, _ = await run_step(step, builders, settings, training_client, course)
            timed.append(record)
            cpu.append({name: used - cpu_before[name] for name, used in clock.read().items()})
        split = {part: statistics.median(r[part] for r in timed) for part in STEP_PARTS}
        cpu_split = {name: statistics.median(c[name] for c in cpu) for name in cpu[0]}
    finally:
        stop_local_stack()

    cut_short = (
        f" of {hp.steps} (the {budget:g} s budget stopped it: not comparable with a full run)"
        if steps < hp.steps
        else ""
    )
    print(
        f"\n(a) learning: {steps} steps{cut_short} in {training_seconds:.1f} s of training wall "
        f"time; held-out scores before -> after, {eval_samples_per_problem} sample(s) a problem:"
    )
    for name in held_out_sets:
        comparison = compare(before[name], after[name])
        print(score_line(name, before[name], after[name], comparison))
    print(
        f"    hyperparameters: {json.dumps(asdict(hp))}, seed {seed}\n"
        f"(b) one local RL step ({hp.groups_per_step} groups x {hp.group_size} rollouts, median "
        f"of {TIMED_STEPS}): save {split['save_s']:.2f} s | sample {split['sample_s']:.2f} s | "
        f"train {split['train_s']:.2f} s | total {sum(split.values()):.2f} s\n"
        f"    CPU per step: stack {cpu_split['stack']:.2f} s, bench process "
        f"{cpu_split['bench']:.2f} s; load average {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores (wall time grows with it)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in asdict(Hyperparams()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument(
        "--eval-samples-per-problem", type=int, default=4, help="on every held-out problem"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--time-budget-seconds", type=float, default=600.0, help="of training, at most"
    )
    args = vars(parser.parse_args())
    eval_samples, seed = args.pop("eval_samples_per_problem"), args.pop("seed")
    budget = args.pop("time_budget_seconds")
    # A benchmark's checkpoints are throwaway: keep them out of the course's storage.
    os.environ["COURSE_LOCAL_STACK_DIR"] = tempfile.mkdtemp(prefix="bench-rl-")
    asyncio.run(run(Hyperparams(**args), eval_samples, seed, budget))


if __name__ == "__main__":
    main()
