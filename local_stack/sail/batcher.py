"""Batched decoding: requests that arrive together are sampled together.

The SDK sends a group's rollouts as concurrent creates; decoding them as one batch on the
compute thread is what makes 64 rollouts cost little more than one. A batch holds one
model (base or one adapter) and one client's requests, and clients take turns: a client
that floods the stack with thousands of requests delays another's next request by one of
its batches, not all of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import torch

from local_stack.engine.compute import run_compute
from local_stack.engine.sampler import Completion, SamplingParams, sample_batch

logger = logging.getLogger(__name__)

# A batch closes once no request has arrived for BATCH_QUIET_SECONDS (the SDK's concurrent
# creates trickle in over a few ms), or after BATCH_WINDOW_SECONDS at most.
BATCH_QUIET_SECONDS = 0.005
BATCH_WINDOW_SECONDS = 0.05
MAX_BATCH_SIZE = 256


@dataclass
class Job:
    """One accepted request on its way through the batcher."""

    prompt: list[int]  # compact ids
    params: SamplingParams
    model_key: str  # requests with the same key share a model and may share a batch
    model: torch.nn.Module
    done: asyncio.Future[Completion]
    client: str = ""  # whose request it is: clients' batches take turns


class Batcher:
    """Decodes concurrent requests together: one batch per client and model, on the compute
    thread, the clients with waiting requests taking turns.

    The first request wakes the loop, which waits while more keep arriving; requests that
    arrive while a batch runs join their client's queue. A failure stays with the request
    that caused it: a batch that fails is decoded again one request at a time.
    """

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self.stats = {"batches": 0, "requests": 0, "largest_batch": 0, "split_batches": 0}
        # Each client's waiting jobs; the first client's batch goes next, then to the back.
        self._queues: dict[str, list[Job]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, job: Job) -> None:
        self._queues.setdefault(job.client, []).append(job)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _queued(self) -> int:
        return sum(map(len, self._queues.values()))

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            deadline = time.monotonic() + BATCH_WINDOW_SECONDS
            seen = 0
            while self._queued() > seen and time.monotonic() < deadline:
                seen = self._queued()
                await asyncio.sleep(BATCH_QUIET_SECONDS)
            self._wake.clear()
            while self._queues:
                await self._decode_next_batch()

    async def _decode_next_batch(self) -> None:
        """Decode the next client's oldest requests for one model; the client goes to the
        back of the line if it has more."""
        client = next(iter(self._queues))
        jobs = self._queues.pop(client)
        model_key = jobs[0].model_key
        batch = [job for job in jobs if job.model_key == model_key][:MAX_BATCH_SIZE]
        taken = {id(job) for job in batch}
        rest = [job for job in jobs if id(job) not in taken]
        if rest:
            self._queues[client] = rest
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(batch))
        await self._decode(batch)

    async def _decode(self, jobs: list[Job]) -> None:
        try:
            completions = await run_compute(
                sample_batch,
                jobs[0].model,
                [job.prompt for job in jobs],
                [job.params for job in jobs],
                self.generator,
                client=jobs[0].client,
            )
        except Exception as exc:
            if len(jobs) == 1:
                _settle(jobs[0], exc)
                return
            # Which request broke the batch is unknown; decoded alone, each one either
            # succeeds or fails by itself, so one bad request cannot fail its neighbours.
            logger.warning("a batch of %d failed (%s); decoding each alone", len(jobs), exc)
            self.stats["split_batches"] += 1
            for job in jobs:
                await self._decode([job])
            return
        for job, completion in zip(jobs, completions, strict=True):
            _settle(job, completion)


def _settle(job: Job, outcome: Completion | Exception) -> None:
    if job.done.done():  # the waiting request went away
        return
    if isinstance(outcome, Exception):
        job.done.set_exception(outcome)
    else:
        job.done.set_result(outcome)
