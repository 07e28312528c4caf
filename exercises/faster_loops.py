"""Notebook 07's exercise: the one-step-ahead schedule, written by the learner.

The check drives the learner's schedule with stand-ins for Sail and Tinker that take a fixed
number of turns of the event loop and write down, in order, what happened: `S1` when
`sample(1)` is called, `s1` when batch 1 is returned, `T1` when training on batch 1 starts,
`t1` when it ends. So it tests the order of events, never the clock. What each call of
`train` returns is the stretch of that log since the previous training ended, so the
learner's list of records is the whole timeline, cut at each step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from exercises.check import Case, Exercise, Mistake

Sample = Callable[[int], Coroutine[Any, Any, int]]
Train = Callable[[int], Awaitable[str]]


class ScriptedServices:
    """`sample` and `train` for the check: sampling takes `sample_turns` turns of the event
    loop, training `train_turns`. Each run (a call of `sample(0)`) writes a log of its own, so
    that a task left over from an earlier run cannot write into a later one's."""

    def __init__(self, sample_turns: int, train_turns: int) -> None:
        self.sample_turns, self.train_turns = sample_turns, train_turns
        self.log: list[str] = []
        self.cut = 0  # where the log stood when the last training ended

    def sample(self, step: int) -> Coroutine[Any, Any, int]:
        if step == 0:
            self.log, self.cut = [], 0
        log = self.log
        log.append(f"S{step}")

        async def sampling() -> int:
            for _ in range(self.sample_turns):
                await asyncio.sleep(0)
            log.append(f"s{step}")
            return step

        return sampling()

    async def train(self, batch: int) -> str:
        if not isinstance(batch, int):
            raise TypeError(
                f"train() was given a {type(batch).__name__}, not a batch: await the task "
                f"that samples it first"
            )
        log = self.log
        log.append(f"T{batch}")
        for _ in range(self.train_turns):
            await asyncio.sleep(0)
        log.append(f"t{batch}")
        if log is not self.log:  # a later run started meanwhile: this record is stale
            return " ".join(log)
        stretch, self.cut = " ".join(log[self.cut :]), len(log)
        return stretch


async def _one_step_ahead(steps: int, sample: Sample, train: Train) -> list:
    next_batch = asyncio.create_task(sample(0))
    records = []
    for step in range(steps):
        batch = await next_batch
        if step + 1 < steps:
            next_batch = asyncio.create_task(sample(step + 1))
        records.append(await train(batch))
    return records


def _schedule_cases() -> list[Case]:
    def scripted(steps: int, sample_turns: int, train_turns: int) -> tuple:
        services = ScriptedServices(sample_turns, train_turns)
        return (steps, services.sample, services.train)

    return [
        Case(
            "3 steps, sampling takes 2 turns of the event loop and training 3 "
            "(S1: sample(1) called, s1: batch 1 returned, T1/t1: training on batch 1 "
            "starts/ends; one record per step)",
            scripted(3, 2, 3),
        ),
        Case("4 steps, sampling slower than training (4 turns against 2)", scripted(4, 4, 2)),
        Case("a single step", scripted(1, 2, 3)),
    ]


async def _sequential(steps: int, sample: Sample, train: Train) -> list:
    return [await train(await sample(step)) for step in range(steps)]


async def _coroutine_not_task(steps: int, sample: Sample, train: Train) -> list:
    batch, records = await sample(0), []
    for step in range(steps):
        following = sample(step + 1) if step + 1 < steps else None
        records.append(await train(batch))
        if following is not None:
            batch = await following
    return records


async def _next_awaited_before_training(steps: int, sample: Sample, train: Train) -> list:
    batch, records = await sample(0), []
    for step in range(steps):
        if step + 1 < steps:
            following = await asyncio.create_task(sample(step + 1))
        records.append(await train(batch))
        if step + 1 < steps:
            batch = following
    return records


async def _trains_the_next_batch(steps: int, sample: Sample, train: Train) -> list:
    batch, records = asyncio.create_task(sample(0)), []
    for step in range(steps):
        next_batch = asyncio.create_task(sample(step + 1))
        records.append(await train(await next_batch))
        batch = next_batch
    await batch
    return records


async def _next_batch_overwrites(steps: int, sample: Sample, train: Train) -> list:
    batch, records = await sample(0), []
    for step in range(steps):
        if step + 1 < steps:
            batch = await asyncio.create_task(sample(step + 1))
        records.append(await train(batch))
    return records


async def _all_ahead(steps: int, sample: Sample, train: Train) -> list:
    batches = [asyncio.create_task(sample(step)) for step in range(steps)]
    return [await train(await batch) for batch in batches]


async def _one_past_the_end(steps: int, sample: Sample, train: Train) -> list:
    next_batch = asyncio.create_task(sample(0))
    records = []
    for step in range(steps):
        batch = await next_batch
        next_batch = asyncio.create_task(sample(step + 1))
        records.append(await train(batch))
    await next_batch
    return records


SCHEDULE = Exercise(
    name="one_step_ahead",
    notebook="07_faster_loops",
    minutes=12,
    reference=_one_step_ahead,
    cases=_schedule_cases,
    mistakes=[
        Mistake(
            "no overlap: sample, then train, in turn",
            "each batch is sampled only when its step comes, so Sail and Tinker take turns "
            "as in notebook 04. Start sampling step k + 1 (asyncio.create_task) before you "
            "await train on step k's batch.",
            _sequential,
        ),
        Mistake(
            "the next sample started only after training finished",
            "you called sample(k + 1) before training, but kept the bare coroutine: a "
            "coroutine does nothing until it is awaited, so the sampling only began after "
            "training finished. Wrap it in asyncio.create_task(...) so it runs meanwhile.",
            _coroutine_not_task,
        ),
        Mistake(
            "off by one: trained on the batch just sampled for the next step",
            "step k trained on batch k + 1, the one you had just started for the next step, "
            "and batch 0 was never trained on. Train on the batch you awaited from the "
            "previous step; the new task is for the next one.",
            _trains_the_next_batch,
        ),
        Mistake(
            "the next batch stored over this step's",
            "step k trained on batch k + 1: you awaited the next batch into the variable "
            "that held this step's, before training, so batch 0 was never trained on and "
            "nothing overlapped. Keep two names: this step's batch, and the task sampling "
            "the next one, awaited only at the top of the next step.",
            _next_batch_overwrites,
        ),
        Mistake(
            "every batch sampled ahead (unbounded staleness)",
            "you started every step's sampling at once: the batch for step k then comes from "
            "the weights before step 0, k steps stale, however long the run. Keep exactly "
            "one batch sampling ahead: start step k + 1's only when step k's has arrived.",
            _all_ahead,
        ),
        Mistake(
            "the next batch awaited before training",
            "you started sampling step k + 1 but waited for it before training on step k, "
            "so the two never overlap. Await the next batch only after train returns, at the "
            "top of the next step.",
            _next_awaited_before_training,
        ),
        Mistake(
            "a batch sampled past the last step",
            "you sampled a batch after the last step, which no step trains on: wasted "
            "rollouts (and, in the cloud, money). Start the next sample only while "
            "step + 1 < steps.",
            _one_past_the_end,
        ),
    ],
)
