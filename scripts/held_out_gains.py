"""Does RL draw out what the base model knows? Notebook 04 quotes this script's output.

Runs notebook 04's loop with its local defaults once per seed in `--seeds`, each from the base
model, and scores two of its held-out sets before and after, as the notebook does (the same
`seed` picks the same problems, and each step's training problems):
- known facts, not trained: facts the base model's warm-up saw, which RL never trains on;
- unseen facts: facts nothing ever showed the model.
Printed per seed and set: the correct rate and the format rate, each before -> after, and
each gain with the course's problem-clustered 95% bootstrap interval (whole problems
resampled, the same ones before and after); then how many seeds' correct-rate gains on each
set have an interval above 0. All of it goes to measurements/held_out_gains.json, with the
command, date and commit, for notebook 04 to render. Under fixed grading a right answer is
always well formed, so correct among well-formed answers is the correct rate over the format
rate. 2 to 6 minutes a seed on the shared two-core machine (load average 8 to 15).

    python scripts/held_out_gains.py --seeds 0 1 2 3 4
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import random
import time

import helpers
from helpers.notebook_parameters import resolve
from helpers.scoring import MathGroupBuilder
from helpers.training import compare, evaluate_now, run_step
from scripts.measurement_files import measurement_start, write_measurement

SETS = {"known facts, not trained": "held_out_known_rows", "unseen facts": "held_out_rows"}
# The settings the runs hold fixed, stored with the results, so that notebook 04 can say
# whether a run of its own is comparable.
MEASURED = ("steps", "group_size", "groups_per_step", "learning_rate", "temperature")
MEASURED += ("max_tokens", "eval_problems", "eval_samples")


async def one_run(course, seed: int) -> dict[str, dict]:
    """Notebook 04's default run for `seed`: its held-out comparisons on SETS."""
    cfg = resolve("04_training_loop", run_name=f"gains-{seed}", seed=seed)  # local defaults
    held_out_sets = {
        name: random.Random(seed).sample(rows, min(cfg.eval_problems, len(rows)))
        for name, rows in ((name, getattr(course, field)) for name, field in SETS.items())
    }
    training_client = await course.service_client.create_lora_training_client_async(
        base_model=course.model_name, rank=course.adapter_config["r"], seed=seed
    )
    before = await evaluate_now(
        f"gains-{seed}-before", held_out_sets, cfg, cfg.eval_samples, training_client, course
    )
    for step in range(cfg.steps):
        rows = random.Random(f"{seed}-{step}").sample(course.train_rows, cfg.groups_per_step)
        builders = [MathGroupBuilder(row, course.renderer, cfg.group_size) for row in rows]
        await run_step(step, builders, cfg, training_client, course)
    after = await evaluate_now(
        f"gains-{seed}-after", held_out_sets, cfg, cfg.eval_samples, training_client, course
    )
    return {name: compare(before[name], after[name]) for name in held_out_sets}


def gain_line(comparison: dict, score: str) -> str:
    value = comparison[score]
    low, high = value["gain_interval"]
    return (
        f"{score} {value['before']:.3f} -> {value['after']:.3f}, "
        f"gain {value['gain']:+.3f} [{low:+.3f}, {high:+.3f}]"
    )


async def main(seeds: list[int]) -> None:
    started = measurement_start()
    course = helpers.connect("local")
    print(f"{datetime.date.today()}: notebook 04's local defaults, seeds {seeds}")
    above_zero = dict.fromkeys(SETS, 0)
    by_seed: dict[int, dict] = {}
    for seed in seeds:
        seed_started = time.perf_counter()
        comparisons = await one_run(course, seed)
        by_seed[seed] = {
            name: {score: comparison[score] for score in ("correct", "format")}
            for name, comparison in comparisons.items()
        }
        print(f"seed {seed} ({time.perf_counter() - seed_started:.0f} s):", flush=True)
        for name, comparison in comparisons.items():
            above_zero[name] += comparison["correct"]["gain_interval"][0] > 0
            print(
                f"  {name}: {gain_line(comparison, 'correct')}; {gain_line(comparison, 'format')}",
                flush=True,
            )
    for name, count in above_zero.items():
        print(f"{name}: correct-rate gain's 95% interval above 0 in {count} of {len(seeds)} seeds")
    defaults = resolve("04_training_loop")
    settings = {name: getattr(defaults, name) for name in MEASURED}
    path = write_measurement("held_out_gains", started, {"settings": settings, "by_seed": by_seed})
    print(f"stored in {path}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    asyncio.run(main(parser.parse_args().seeds))
