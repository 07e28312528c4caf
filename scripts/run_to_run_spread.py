"""How far apart do two runs of notebook 06 land by chance alone? The notebook quotes this.

Repeats notebook 06's runs `--runs` times with its local defaults: each repeat trains every
schedule in `--schedules` (0 is synchronous, k > 0 keeps k batches in flight) from the same
start on the same problems, and scores its final weights on the same held-out problems. Only
the sampled rollouts differ between repeats. Printed, per score:
- for each schedule, the standard deviation across repeats, the standard error of one
  evaluation, and what is left for the run itself, tau = sqrt(sd² - se²);
- for each k > 0, the mean and standard deviation of (k-stale score - synchronous score).
The simulated latencies are off: they change when samples arrive, not what the model learns.
About 7 s per run on two cores; a report is printed every 10 repeats.

    python scripts/run_to_run_spread.py --runs 60
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import statistics

import sail.tinker

import helpers
from helpers.pipelined import Timeline, run_loop
from helpers.serving import sail_policy
from helpers.stats import reward_standard_error
from helpers.training import LoopSettings, evaluate

# Notebook 06's local defaults.
SEED, STEPS, GROUP_SIZE, GROUPS_PER_STEP, MAX_TOKENS = 0, 8, 8, 4, 24
EVAL_PROBLEMS, EVAL_SAMPLES = 60, 4
METRICS = ("reward", "format")


def standard_errors(scores: dict) -> dict[str, float]:
    binomial = math.sqrt(scores["format"] * (1 - scores["format"]) / scores["samples"])
    return {"reward": reward_standard_error(scores), "format": binomial}


async def one_run(course, name: str, staleness: int, eval_rows: list[dict]) -> dict:
    """Train one run of `staleness` from the base model; its held-out scores and their se."""
    training_client = await course.service_client.create_lora_training_client_async(
        base_model=course.model_name, rank=course.adapter_config["r"], seed=SEED
    )
    settings = LoopSettings(
        run_name=name,
        group_size=GROUP_SIZE,
        learning_rate=course.defaults["learning_rate"],
        max_tokens=MAX_TOKENS,
        temperature=1.0,
        completion_window="balanced",
    )

    def rows_for_step(step: int) -> list[dict]:
        return random.Random(f"{SEED}-{step}").sample(course.train_rows, GROUPS_PER_STEP)

    await run_loop(training_client, course, settings, rows_for_step, STEPS, staleness, Timeline())
    sampling = {"model_name": course.model_name, "max_tokens": MAX_TOKENS, "temperature": 1.0}
    policy = await sail_policy(
        training_client, course.service_client, course.adapter_config, f"{name}-eval", **sampling
    )
    scores = await evaluate(policy, eval_rows, course.renderer, EVAL_SAMPLES)
    return {"scores": scores, "se": standard_errors(scores)}


def report(results: dict[int, list[dict]]) -> None:
    for metric in METRICS:
        print(f"{metric}:")
        for staleness, runs in results.items():
            sd = statistics.stdev(run["scores"][metric] for run in runs)
            se = math.sqrt(statistics.mean(run["se"][metric] ** 2 for run in runs))
            tau = math.sqrt(max(sd**2 - se**2, 0.0))
            print(
                f"  staleness {staleness}: sd {sd:.4f}, one evaluation's se {se:.4f}, tau {tau:.4f}"
            )
        for staleness, runs in results.items():
            if staleness:
                differences = [
                    run["scores"][metric] - sync["scores"][metric]
                    for run, sync in zip(runs, results[0], strict=True)
                ]
                mean, sd = statistics.mean(differences), statistics.stdev(differences)
                print(f"  {staleness} stale minus synchronous: mean {mean:+.4f}, sd {sd:.4f}")


async def main(runs: int, schedules: list[int]) -> None:
    course = helpers.connect("local")
    course.simulate_latency(latency=0.0, train_latency=0.0)
    sail.tinker._POLL_INTERVAL_SECONDS = 0.05  # rollouts come back in well under a second
    eval_rows = random.Random(SEED).sample(course.held_out_rows, EVAL_PROBLEMS)
    results: dict[int, list[dict]] = {staleness: [] for staleness in schedules}
    for repeat in range(runs):
        for staleness in schedules:
            name = f"spread-{repeat}-k{staleness}"
            results[staleness].append(await one_run(course, name, staleness, eval_rows))
        print(f"repeat {repeat + 1}/{runs} done", flush=True)
        if repeat + 1 == runs or (repeat + 1) % 10 == 0:  # so far, in case you stop it early
            report(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="repeats, at least 2")
    parser.add_argument(
        "--schedules", type=int, nargs="+", default=[0, 1, 3], help="staleness of each run"
    )
    arguments = parser.parse_args()
    schedules = sorted({0, *arguments.schedules})  # the differences need the synchronous run
    asyncio.run(main(max(2, arguments.runs), schedules))
