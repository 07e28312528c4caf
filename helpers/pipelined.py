# Generated from notebooks/07_faster_loops.ipynb by `make helpers`. Do not edit: change
# the `# @save` cells there, then run `make helpers` again.
"""The training loop with sampling overlapped: batches sampled up to k steps ahead.

`run_loop` is notebook 04's loop when k = 0; with k > 0, Sail samples up to k batches while
Tinker trains. A `Timeline` records when each part ran, and `timeline_figure` draws it;
`bench/pipelining.py` uses the loop and the timeline.
"""

import asyncio
import collections
import contextlib
import functools
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import matplotlib.pyplot as plt
import torch
from tinker_cookbook.rl.metrics import compute_kl_sample_train
from tinker_cookbook.rl.types import TrajectoryGroup

from helpers.runlog import new_run_id
from helpers.scoring import MathGroupBuilder
from helpers.training import (
    LoopSettings,
    delete_checkpoint,
    mean_reward,
    rollout_groups,
    snapshot_policy,
    split_degenerate_groups,
    train_on_groups,
)


@dataclass
class Timeline:
    """Spans `(what, step, start, end)` of one run, in seconds since `origin`.

    `what` is "snapshot", "sample" or "train"; `step` is the step the work is for.
    """

    origin: float = field(default_factory=time.monotonic)
    spans: list[tuple[str, int, float, float]] = field(default_factory=list)

    def record(self, what: str, step: int, started: float) -> None:
        self.spans.append((what, step, started - self.origin, time.monotonic() - self.origin))

    def seconds(self, what: str) -> dict[int, float]:
        return {step: end - start for kind, step, start, end in self.spans if kind == what}

    def sample_seconds(self) -> float:
        """S: the median time one batch spent sampling."""
        return statistics.median(self.seconds("sample").values())

    def tinker_seconds(self) -> float:
        """T: the median time Tinker spent on a step (its snapshot and its training)."""
        snapshots, trains = self.seconds("snapshot"), self.seconds("train")
        return statistics.median(snapshots[step] + trains[step] for step in trains)

    def seconds_per_step(self, lanes: int = 1) -> float:
        """Typical wall time per step after the first (which waits for the pipeline to fill).

        The median over windows of `lanes` consecutive steps, per step: with k lanes,
        batches can arrive in bunches of k, and a k-step window spans one bunch. A median
        rather than a mean, so a moment when this shared machine stalls us does not count.
        """
        ends = sorted(end for kind, _, _, end in self.spans if kind == "train")
        lanes = min(lanes, len(ends) - 1)
        windows = [(ends[i + lanes] - ends[i]) / lanes for i in range(len(ends) - lanes)]
        return statistics.median(windows)


def predicted_seconds_per_step(max_staleness: int, sample_s: float, tinker_s: float) -> float:
    """S + T for the synchronous loop; max(S / k, T) with k batches in flight."""
    if max_staleness == 0:
        return sample_s + tinker_s
    return max(sample_s / max_staleness, tinker_s)


# Colours of a timeline's bars, by what ran.
SPAN_COLOURS = {"snapshot": "tab:gray", "train": "tab:orange", "sample": "tab:blue"}


def timeline_figure(runs: dict[str, tuple[list[tuple[str, int, float, float]], int]]) -> plt.Figure:
    """One panel per run: when Tinker snapshotted and trained (top row) and when each batch
    was being sampled on Sail (one row per lane: batch `step` in lane `step % lanes`).

    `runs` maps a run's name to its spans, a `Timeline`'s `(what, step, start, end)` in seconds
    since the run began, and its number of sampling lanes.
    """
    heights = [1 + lanes for _, lanes in runs.values()]
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(11, 0.8 + 0.45 * sum(heights)), height_ratios=heights
    )
    axes = [axes] if len(runs) == 1 else list(axes)
    end = max(span[3] for spans, _ in runs.values() for span in spans)
    for ax, (name, (spans, lanes)) in zip(axes, runs.items(), strict=True):
        for what, step, start, stop in spans:
            row = 0 if what != "sample" else 1 + step % lanes
            ax.barh(row, stop - start, left=start, height=0.7, color=SPAN_COLOURS[what])
            if what != "snapshot":
                ax.text((start + stop) / 2, row, str(step), ha="center", va="center", fontsize=8)
        rows = ["Tinker"] + [f"Sail lane {lane + 1}" for lane in range(lanes)]
        ax.set_yticks(range(len(rows)), rows)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, end * 1.01)
        ax.set_title(name, loc="left", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("seconds since the run started (bar labels: the step a batch is for)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in SPAN_COLOURS.values()]
    fig.legend(handles, ["snapshot", "train", "sample"], loc="upper right", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    plt.close(fig)
    return fig


@dataclass
class Batch:
    """The rollouts for one step, and which weights sampled them."""

    step: int  # the step that trains on it
    sampled_at: int  # the step whose snapshot sampled it
    groups: list[TrajectoryGroup]
    dropped_rollouts: int


Sample = Callable[[int], Coroutine[Any, Any, Batch]]  # a schedule's `sample(step)`
Train = Callable[[Batch], Awaitable[dict]]  # and its `train(batch)`


async def sample_batch(
    step: int,
    sampled_at: int,
    policy: Any,
    rows: list[dict],
    course: Any,
    settings: LoopSettings,
    timeline: Timeline,
) -> Batch:
    started = time.monotonic()
    builders = [MathGroupBuilder(row, course.renderer, settings.group_size) for row in rows]
    groups, dropped = await rollout_groups(builders, policy)
    timeline.record("sample", step, started)
    return Batch(step, sampled_at, groups, dropped)


def off_policy_metrics(data: list, learner_logprobs: list[torch.Tensor]) -> dict:
    """How far the learner is from the sampler, on the sampled tokens: the cookbook's KL
    estimate (v2) and the spread and maximum of the per-token importance weights."""
    kl = compute_kl_sample_train(data, learner_logprobs)["optim/kl_sample_train_v2"]
    log_ratios = []
    for datum, learner in zip(data, learner_logprobs, strict=True):
        sampled = datum.loss_fn_inputs["mask"].to_torch() > 0
        sampler = datum.loss_fn_inputs["logprobs"].to_torch()
        log_ratios.append(learner[sampled] - sampler[sampled])
    weights = torch.cat(log_ratios).exp()
    return {"kl": kl, "weight_std": weights.std().item(), "weight_max": weights.max().item()}


async def train_on_batch(
    batch: Batch, training_client: Any, settings: LoopSettings, timeline: Timeline
) -> dict:
    """One optimizer step on `batch` (skipped if every group is degenerate); its metrics."""
    started = time.monotonic()
    training_groups, _ = split_degenerate_groups(batch.groups)
    record = {
        "step": batch.step,
        "staleness": batch.step - batch.sampled_at,
        "reward": mean_reward(batch.groups),
        "datums": 0,
        "dropped_rollouts": batch.dropped_rollouts,
        "kl": math.nan,
        "weight_std": math.nan,
        "weight_max": math.nan,
    }
    if training_groups:
        data, learner_logprobs, _ = await train_on_groups(
            training_groups, settings.learning_rate, training_client
        )
        record |= {"datums": len(data), **off_policy_metrics(data, learner_logprobs)}
    timeline.record("train", batch.step, started)
    return record


async def synchronous(steps: int, sample: Sample, train: Train) -> list[dict]:
    """Notebook 04's order: sample a step's batch, then train on it."""
    return [await train(await sample(step)) for step in range(steps)]


async def k_steps_ahead(steps: int, sample: Sample, train: Train, k: int) -> list[dict]:
    """`one_step_ahead` with k batches sampling: the batch trained at step t was asked for
    at step t - k (fewer while the pipeline fills)."""
    in_flight = collections.deque(asyncio.create_task(sample(s)) for s in range(min(k, steps)))
    records = []
    for step in range(steps):
        batch = await in_flight.popleft()
        if step + k < steps:
            in_flight.append(asyncio.create_task(sample(step + k)))
        records.append(await train(batch))
    return records


async def run_loop(
    training_client: Any,
    course: Any,
    settings: LoopSettings,
    rows_for_step: Any,
    steps: int,
    max_staleness: int,
    timeline: Timeline,
    one_step_ahead: Any = None,
) -> list[dict]:
    """Train `steps` steps on batches sampled at most `max_staleness` steps earlier.

    0 is the synchronous loop; 1 runs `one_step_ahead` (the notebook passes the one its check
    chose), k > 1 `k_steps_ahead`. `sample(b)` samples batch b from the newest snapshot at the
    moment it is called; `train(batch)` trains on it, then snapshots the weights for the next
    step. `rows_for_step(step)` gives the problems of a step. Returns one record per step.
    Each snapshot is deleted once no batch samples from it any more, as notebook 04 does.
    """
    if max_staleness == 0:
        schedule = synchronous
    elif max_staleness == 1 and one_step_ahead is not None:
        schedule = one_step_ahead
    else:
        schedule = functools.partial(k_steps_ahead, k=max_staleness)
    run = new_run_id()  # this loop's runs never resume: each call is a new run
    snapshots: dict[int, Any] = {}  # step -> its snapshot, while a batch may sample from it
    asked: dict[int, int] = {}  # batch -> the step whose snapshot samples it, until it is back
    sampling: set[asyncio.Task] = set()
    newest, stopped = 0, False

    async def snapshot(step: int) -> None:
        nonlocal newest
        started = time.monotonic()
        name = f"{settings.run_name}-step-{step}"
        snapshots[step] = await snapshot_policy(name, settings, training_client, course, run)
        timeline.record("snapshot", step, started)
        newest = step

    async def delete_unused_snapshots() -> None:
        in_use = set() if stopped else {newest, *asked.values()}
        for step in [s for s in snapshots if s not in in_use]:
            await delete_checkpoint(course.service_client, snapshots.pop(step).checkpoint_path)

    def sample(batch: int) -> Coroutine[Any, Any, Batch]:
        asked[batch] = newest  # the weights as they are now, however late the sampling starts
        return sampled(batch, newest)

    async def sampled(batch: int, sampled_at: int) -> Batch:
        if stopped:  # the run failed before this batch began: sample nothing
            raise asyncio.CancelledError
        task = asyncio.current_task()
        assert task is not None  # a coroutine always runs in a task
        sampling.add(task)
        try:
            rows = rows_for_step(batch)
            policy = snapshots[sampled_at]
            return await sample_batch(batch, sampled_at, policy, rows, course, settings, timeline)
        finally:
            sampling.discard(task)
            asked.pop(batch, None)

    async def train(batch: Batch) -> dict:
        record = await train_on_batch(batch, training_client, settings, timeline)
        if batch.step + 1 < steps:
            await snapshot(batch.step + 1)
        await delete_unused_snapshots()
        return record

    try:
        await snapshot(0)
        return await schedule(steps, sample, train)
    finally:
        stopped = True
        for task in sampling - {asyncio.current_task()}:  # only left over if a step failed
            task.cancel()
        with contextlib.suppress(Exception):  # a failure that got us here matters more
            await delete_unused_snapshots()
