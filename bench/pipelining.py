"""Overlapping sampling and training, measured: `python -m bench.pipelining`.

Runs the course's pipelined loop (`helpers.pipelined`, built from notebook 07) three ways
side by side in one process, under the same simulated cloud latencies as the notebook's
defaults: synchronous, 1 step stale, and k steps stale. For each it prints the time per
step predicted from the synchronous run's sampling time S and Tinker time T (S + T,
max(S, T), max(S / k, T)) next to the measured one (and the run's own S and T), and the
1-step-stale run's wall time as a fraction of the synchronous run's (target: at most 0.65).
On a quiet machine every measured / predicted ratio lies within 0.85 to 1.15. The notebook
reports the same ratios without asserting them; its Try this runs here with flags, e.g.
`--train-latency 1.5` (T below S: 3 steps stale should be fastest).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import tempfile
import time

POLL_SECONDS = 0.25  # the notebook's local poll interval (the SDK's default is 20 s)


async def run(args: argparse.Namespace) -> None:
    import sail.tinker

    import helpers
    from helpers.pipelined import Timeline, predicted_seconds_per_step, run_loop
    from helpers.training import LoopSettings
    from local_stack.client.control_client import set_knobs
    from local_stack.client.supervisor import start_local_stack, stop_local_stack

    stack = start_local_stack()
    try:
        course = helpers.connect("local")  # reuses the stack started above
        gc.collect()  # as notebook 07 does: no full collection pausing the runs
        gc.freeze()
        set_knobs(stack.url, latency=args.sample_latency, train_latency=args.train_latency)
        sail.tinker._POLL_INTERVAL_SECONDS = POLL_SECONDS
        print(
            f"simulated: {args.sample_latency} s per rollout, at least {args.train_latency} s "
            f"per training step; {args.steps} steps of {args.groups_per_step} x "
            f"{args.group_size} rollouts; Sail polled every {POLL_SECONDS} s"
        )

        def rows_for_step(step: int) -> list[dict]:
            return random.Random(f"{args.seed}-{step}").sample(
                course.train_rows, args.groups_per_step
            )

        schedules = {"synchronous": 0, "1 step stale": 1, f"{args.k} steps stale": args.k}
        timelines, walls = {}, {}
        for name, staleness in schedules.items():
            client = await course.service_client.create_lora_training_client_async(
                base_model=course.model_name, rank=course.adapter_config["r"], seed=args.seed
            )
            settings = LoopSettings(
                run_name=f"bench-{staleness}",
                group_size=args.group_size,
                learning_rate=course.defaults["learning_rate"],
                max_tokens=course.defaults["max_tokens"],
                temperature=1.0,
                completion_window="balanced",
            )
            timelines[name] = timeline = Timeline()
            await run_loop(client, course, settings, rows_for_step, args.steps, staleness, timeline)
            walls[name] = time.monotonic() - timeline.origin
    finally:
        stop_local_stack()

    sample_s = timelines["synchronous"].sample_seconds()
    tinker_s = timelines["synchronous"].tinker_seconds()
    print(f"S = {sample_s:.2f} s per batch, T = {tinker_s:.2f} s per step (synchronous run)")
    print(f"{'schedule':>16s} | own S, T (s) | predicted s/step | measured s/step | ratio | wall")
    for name, staleness in schedules.items():
        timeline = timelines[name]
        predicted = predicted_seconds_per_step(staleness, sample_s, tinker_s)
        measured = timeline.seconds_per_step(max(1, staleness))
        print(
            f"{name:>16s} | {timeline.sample_seconds():5.2f}, {timeline.tinker_seconds():5.2f} | "
            f"{predicted:16.2f} | {measured:15.2f} | {measured / predicted:5.2f} | "
            f"{walls[name]:5.1f} s"
        )
    ratio = walls["1 step stale"] / walls["synchronous"]
    print(f"1 step stale / synchronous wall time: {ratio:.2f} (target <= 0.65)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--groups-per-step", type=int, default=4)
    parser.add_argument("--sample-latency", type=float, default=2.0)
    parser.add_argument("--train-latency", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    # A benchmark's checkpoints are throwaway: keep them out of the course's storage.
    os.environ["COURSE_LOCAL_STACK_DIR"] = tempfile.mkdtemp(prefix="bench-pipelining-")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
