"""RL on the local stack, measured: `python -m bench.rl`.

It runs the course's own loop, `helpers.training` (built from notebook 04): `run_step` for
every step and `evaluate` for the held-out set, through the real tinker, sail and
tinker-cookbook SDKs on `helpers.connect("local")`.
(a) Learning is real: the loop trains on the arithmetic set's train split, and the held-out
    reward is measured before and after, with the local Sail sampler seeded. Format rate and
    accuracy given correct format are shown separately, so a gain from format alone is visible.
(b) One local RL step's time, as `run_step` splits it: save (sampler checkpoint and signed
    URL), sample (rollouts and scoring; Sail loads the new adapter on the first request) and
    train (forward_backward + optim_step).

The defaults are the ones notebook 04 should use on the local backend.
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
from typing import Any

from helpers.stats import reward_standard_error
from local_stack.control.client import set_knobs

STEP_PARTS = ("save_s", "sample_s", "train_s")  # run_step's timings, in the order they run


@dataclass(frozen=True)
class Hyperparams:
    """What the loop runs with; the defaults are the tuned local ones."""

    group_size: int = 8
    groups_per_step: int = 8
    learning_rate: float = 1e-3
    steps: int = 80
    temperature: float = 1.0
    max_tokens: int = 24  # a well-formed answer takes at most 18 tokens
    time_budget_seconds: float = 60.0


def held_out_line(scores: dict) -> str:
    dropped = f" | {scores['dropped_rollouts']} dropped" if scores["dropped_rollouts"] else ""
    return (
        f"reward {scores['reward']:+.3f} ± {reward_standard_error(scores):.3f} | format "
        f"{scores['format']:.3f} | accuracy given format {scores['correct_given_format']:.3f}"
        f" | n={scores['samples']}{dropped}"
    )


async def held_out(
    course: Any, training_client: Any, settings: Any, name: str, samples: int, seed: int, url: str
) -> dict:
    """`evaluate` on every held-out problem, sampled from the current weights."""
    from helpers.training import evaluate, snapshot_policy

    policy = await snapshot_policy(name, settings, training_client, course)
    set_knobs(url, seed=seed)
    return await evaluate(policy, course.held_out_rows, course.renderer, samples)


async def run(hp: Hyperparams, eval_samples_per_problem: int, seed: int) -> None:
    import helpers
    from helpers.training import LoopSettings, run_step
    from local_stack.supervisor import start_local_stack, stop_local_stack

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
        rng = random.Random(seed)

        def held_out_now(name: str):
            return held_out(
                course, training_client, settings, name, eval_samples_per_problem, seed, stack.url
            )

        before = await held_out_now("bench-before")
        print(f"held-out before: {held_out_line(before)}")
        loop_started, steps, last = time.perf_counter(), 0, 0.0
        # Stop before a step that would likely end past the time budget.
        while (
            steps < hp.steps and time.perf_counter() - loop_started + last <= hp.time_budget_seconds
        ):
            rows = rng.sample(course.train_rows, hp.groups_per_step)
            record = await run_step(steps, rows, settings, training_client, course)
            last = sum(record[part] for part in STEP_PARTS)
            print(f"step {steps:2d} | reward {record['reward']:+.3f} | {last:.2f} s")
            steps += 1
        training_seconds = time.perf_counter() - loop_started
        after = await held_out_now("bench-after")
        print(f"held-out after:  {held_out_line(after)}")

        timed = []
        for step in range(steps, steps + 3):
            rows = rng.sample(course.train_rows, hp.groups_per_step)
            timed.append(await run_step(step, rows, settings, training_client, course))
        split = {part: statistics.median(r[part] for r in timed) for part in STEP_PARTS}
    finally:
        stop_local_stack()

    gain_se = (reward_standard_error(before) ** 2 + reward_standard_error(after) ** 2) ** 0.5
    print(
        f"\n(a) learning: {steps} steps in {training_seconds:.1f} s of training wall time\n"
        f"    held-out reward {before['reward']:+.3f} -> {after['reward']:+.3f} "
        f"(gain {after['reward'] - before['reward']:+.3f} ± {gain_se:.3f}); "
        f"format {before['format']:.3f} -> {after['format']:.3f}; accuracy given format "
        f"{before['correct_given_format']:.3f} -> {after['correct_given_format']:.3f}\n"
        f"    hyperparameters: {json.dumps(asdict(hp))}, seed {seed}\n"
        f"(b) one local RL step ({hp.groups_per_step} groups x {hp.group_size} rollouts, median "
        f"of 3): save {split['save_s']:.2f} s | sample {split['sample_s']:.2f} s | "
        f"train {split['train_s']:.2f} s | total {sum(split.values()):.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in asdict(Hyperparams()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument(
        "--eval-samples-per-problem", type=int, default=2, help="of the 400 held-out problems"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = vars(parser.parse_args())
    eval_samples, seed = args.pop("eval_samples_per_problem"), args.pop("seed")
    # A benchmark's checkpoints are throwaway: keep them out of the course's storage.
    os.environ["COURSE_LOCAL_STACK_DIR"] = tempfile.mkdtemp(prefix="bench-rl-")
    asyncio.run(run(Hyperparams(**args), eval_samples, seed))


if __name__ == "__main__":
    main()
