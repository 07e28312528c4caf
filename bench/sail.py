"""Benchmark the local Sail server through the real SDK: `python -m bench.sail`.

Prints single-request latency, 64 concurrent rollouts batched vs one at a time, and 64
concurrent rollouts under 1 s of injected latency. Sail's completer sleeps 20 s between
polls (`sail.tinker._POLL_INTERVAL_SECONDS`); the latency case shortens that here, since a
real service's latency would be hidden the same way only by a shorter poll.
"""

from __future__ import annotations

import asyncio
import statistics
import time

import sail
import sail.tinker

from helpers.scoring import QUESTION_SUFFIX
from kimi import MODEL_NAME, offline_kimi_renderer
from local_stack.client.control_client import get_stats, set_knobs
from local_stack.client.dataset import arithmetic_dataset
from local_stack.client.supervisor import start_local_stack, stop_local_stack

ROLLOUTS = 64
MAX_TOKENS = 48
INJECTED_LATENCY_SECONDS = 1.0


async def _timed(coroutine) -> float:
    started = time.perf_counter()
    await coroutine
    return time.perf_counter() - started


async def run(url: str) -> None:
    renderer = offline_kimi_renderer()
    questions = arithmetic_dataset()["held_out"]["question"][:ROLLOUTS]
    prompts = [
        renderer.build_generation_prompt([{"role": "user", "content": q + QUESTION_SUFFIX}])
        for q in questions
    ]
    stop = renderer.get_stop_sequences()
    completer = sail.SailTokenCompleter(model=MODEL_NAME, max_tokens=MAX_TOKENS, temperature=1.0)

    async def one_by_one() -> None:
        for prompt in prompts:
            await completer(prompt, stop=stop)

    async def all_at_once() -> None:
        await asyncio.gather(*(completer(prompt, stop=stop) for prompt in prompts))

    await all_at_once()  # warm-up
    singles = [await _timed(completer(prompts[i], stop=stop)) for i in range(10)]
    print(
        f"single request: median {statistics.median(singles) * 1000:.0f} ms "
        f"(min {min(singles) * 1000:.0f}, max {max(singles) * 1000:.0f})"
    )
    sequential = await _timed(one_by_one())
    batched = await _timed(all_at_once())
    print(f"{ROLLOUTS} rollouts one at a time: {sequential:.2f} s")
    print(
        f"{ROLLOUTS} concurrent rollouts, batched: {batched:.2f} s "
        f"-> {sequential / batched:.1f}x faster (target >= 5x)"
    )

    set_knobs(url, latency=INJECTED_LATENCY_SECONDS)
    poll_interval = sail.tinker._POLL_INTERVAL_SECONDS
    sail.tinker._POLL_INTERVAL_SECONDS = 0.05
    try:
        delayed = await _timed(all_at_once())
    finally:
        sail.tinker._POLL_INTERVAL_SECONDS = poll_interval
        set_knobs(url, latency=0.0)
    print(
        f"{ROLLOUTS} concurrent rollouts with {INJECTED_LATENCY_SECONDS:.0f} s injected latency "
        f"(poll interval 0.05 s): {delayed:.2f} s (target <= "
        f"{INJECTED_LATENCY_SECONDS + 0.5:.1f} s)"
    )
    stats = get_stats(url)
    print(
        f"server batches: {stats['batches']} for {stats['requests']} requests, "
        f"largest {stats['largest_batch']}"
    )


def main() -> None:
    stack = start_local_stack()
    try:
        asyncio.run(run(stack.url))
    finally:
        stop_local_stack()


if __name__ == "__main__":
    main()
