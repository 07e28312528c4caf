"""How far apart do two runs of notebook 06 land by chance alone? The notebook quotes this.

Repeats notebook 06's runs `--runs` times with its local defaults: each repeat trains every
schedule in `--schedules` (0 is synchronous, k > 0 keeps k batches in flight) from the same
start on the same problems, and scores its final weights on the same held-out problems. Only
the sampled rollouts differ between repeats. For each score and each k > 0 it prints, over
the repeats, the difference D = (k-stale score - synchronous score):
- its mean and standard deviation sd_D (what a run-to-run comparison really varies by);
- se_D, the root-mean-square of one repeat's problem-clustered standard error of D (notebook
  04's bootstrap over whole problems, as the notebook computes it from one pair of runs);
- tau_D = sqrt(max(sd_D² - se_D², 0)): what the runs' own chance adds to D's variance beyond
  what one evaluation's bootstrap sees. The notebook adds tau_D² to its bootstrap variance.
The simulated latencies are off: they change when samples arrive, not what the model learns.
About 20 s per repeat of three schedules on two cores; a report is printed every 5 repeats.

    python scripts/run_to_run_spread.py --runs 40
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import math
import random
import statistics

import sail.tinker

import helpers
from helpers.notebook_parameters import resolve
from helpers.pipelined import Timeline, difference_standard_errors, run_loop
from helpers.serving import sail_policy
from helpers.training import LoopSettings, evaluate

CFG = resolve("06_faster_loops")  # its local defaults
METRICS = ("reward", "format", "correct_given_format")


async def one_run(course, name: str, staleness: int, eval_rows: list[dict]) -> dict:
    """Train one run of `staleness` from the base model; `evaluate`'s held-out scores."""
    training_client = await course.service_client.create_lora_training_client_async(
        base_model=course.model_name, rank=course.adapter_config["r"], seed=CFG.seed
    )
    settings = LoopSettings(
        run_name=name,
        group_size=CFG.group_size,
        learning_rate=CFG.learning_rate,
        max_tokens=CFG.max_tokens,
        temperature=CFG.temperature,
        completion_window="balanced",
    )

    def rows_for_step(step: int) -> list[dict]:
        return random.Random(f"{CFG.seed}-{step}").sample(course.train_rows, CFG.groups_per_step)

    await run_loop(
        training_client, course, settings, rows_for_step, CFG.steps, staleness, Timeline()
    )
    sampling = {
        "model_name": course.model_name,
        "max_tokens": CFG.max_tokens,
        "temperature": CFG.temperature,
    }
    policy = await sail_policy(
        training_client, course.service_client, course.adapter_config, f"{name}-eval", **sampling
    )
    return await evaluate(policy, eval_rows, course.renderer, CFG.eval_samples)


def report(results: dict[int, list[dict]]) -> None:
    synchronous = results[0]
    print(f"after {len(synchronous)} repeats ({datetime.date.today().isoformat()}):")
    for metric in METRICS:
        print(
            f"  {metric} (synchronous mean {statistics.mean(r[metric] for r in synchronous):.3f}):"
        )
        for staleness, runs in results.items():
            if not staleness:
                continue
            differences = [
                run[metric] - sync[metric] for run, sync in zip(runs, synchronous, strict=True)
            ]
            errors = [
                difference_standard_errors(sync["problems"], run["problems"])[metric]
                for run, sync in zip(runs, synchronous, strict=True)
            ]
            mean, sd = statistics.mean(differences), statistics.stdev(differences)
            se = math.sqrt(statistics.mean(e**2 for e in errors))
            tau = math.sqrt(max(sd**2 - se**2, 0.0))
            print(
                f"    {staleness} stale minus synchronous: mean {mean:+.4f}, sd_D {sd:.4f}, "
                f"se_D {se:.4f}, tau_D {tau:.4f}"
            )


async def main(runs: int, schedules: list[int]) -> None:
    course = helpers.connect("local")
    course.simulate_latency(latency=0.0, train_latency=0.0)
    sail.tinker._POLL_INTERVAL_SECONDS = 0.05  # rollouts come back in well under a second
    eval_rows = random.Random(CFG.seed).sample(course.held_out_rows, CFG.eval_problems)
    results: dict[int, list[dict]] = {staleness: [] for staleness in schedules}
    for repeat in range(runs):
        for staleness in schedules:
            name = f"spread-{repeat}-k{staleness}"
            results[staleness].append(await one_run(course, name, staleness, eval_rows))
        print(f"repeat {repeat + 1}/{runs} done", flush=True)
        if repeat + 1 == runs or (repeat + 1) % 5 == 0:  # so far, in case you stop it early
            report(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40, help="repeats, at least 2")
    parser.add_argument(
        "--schedules", type=int, nargs="+", default=[0, 1, 3], help="staleness of each run"
    )
    arguments = parser.parse_args()
    schedules = sorted({0, *arguments.schedules})  # the differences need the synchronous run
    asyncio.run(main(max(2, arguments.runs), schedules))
