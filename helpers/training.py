# Generated from notebooks/03_training_loop.ipynb by `make helpers`. Do not edit: change
# the notebook's `# @save` cells, then run `make helpers` again.
"""One GRPO step: snapshot, roll out on Sail, score, advantages, one Tinker optimizer step.

Also the held-out evaluation that notebook 03 runs before and after training.
"""

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from tinker_cookbook.exceptions import AllTrajectoriesFailedError
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.rollout_strategy import MinViableGroup
from tinker_cookbook.rl.rollouts import do_group_rollout
from tinker_cookbook.rl.train import train_step
from tinker_cookbook.rl.types import TrajectoryGroup

from helpers.rollout_failures import CountingPolicy
from helpers.scoring import MathGroupBuilder
from helpers.serving import sail_policy


@dataclass(frozen=True)
class LoopSettings:
    """The knobs of one training run (notebook 03's parameters, checked)."""

    run_name: str
    group_size: int
    learning_rate: float
    max_tokens: int
    temperature: float
    completion_window: str


def mean_reward(groups: list[TrajectoryGroup]) -> float:
    rewards = [float(r) for group in groups for r in group.get_total_rewards()]
    return sum(rewards) / len(rewards) if rewards else 0.0


def rollout_metrics(groups: list[TrajectoryGroup]) -> list[dict]:
    """What `MathEnv.step` reported for each rollout: {"correct": 0 or 1, "format": 0 or 1}."""
    return [t.transitions[-1].metrics for g in groups for t in g.trajectories_G]


def metric_rate(groups: list[TrajectoryGroup], key: str) -> float:
    """The fraction of rollouts whose environment reported `key` (e.g. "correct") as 1."""
    values = [m[key] for m in rollout_metrics(groups)]
    return sum(values) / len(values) if values else 0.0


def split_degenerate_groups(
    groups: list[TrajectoryGroup],
) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]:
    """Separate groups whose rewards differ (they teach) from groups where all are equal."""
    kept, degenerate = [], []
    for group in groups:
        rewards = [float(r) for r in group.get_total_rewards()]
        (degenerate if len(set(rewards)) == 1 else kept).append(group)
    return kept, degenerate


ROLLOUT_TIMEOUT_S = 600  # a rollout that takes longer counts as failed


async def rollout_groups(
    builders: list[MathGroupBuilder], policy: Any, min_successful: int = 2
) -> tuple[list[TrajectoryGroup], int]:
    """Roll out every group concurrently.

    A failed rollout (a Sail error, a timeout) is dropped, not retried. A group survives
    while `min_successful` of its rollouts do: for training, two is the least GRPO can
    compare. Returns the surviving groups and how many rollouts were dropped. If every
    rollout fails, it raises instead: a run that went on would learn and score nothing.
    """
    counted = CountingPolicy(policy)
    strategy = MinViableGroup(min_successful, max_retries=0, per_rollout_timeout=ROLLOUT_TIMEOUT_S)
    results = await asyncio.gather(
        *(do_group_rollout(b, counted, strategy=strategy) for b in builders),
        return_exceptions=True,
    )
    counted.raise_if_all_failed()
    groups, dropped = [], 0
    for builder, result in zip(builders, results, strict=True):
        if isinstance(result, AllTrajectoriesFailedError):
            dropped += builder.group_size
        elif isinstance(result, BaseException):
            raise result
        else:
            groups.append(result)
            dropped += len(result.rollout_errors)
    return groups, dropped


async def run_step(
    step: int,
    rows: list[dict],
    settings: LoopSettings,
    training_client: Any,
    course: Any,
) -> dict:
    """One step of the loop; returns the metrics that notebook 03 logs and plots."""
    started = time.monotonic()
    policy = await sail_policy(
        training_client,
        course.service_client,
        course.adapter_config,
        f"{settings.run_name}-step-{step}",
        model_name=course.model_name,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        completion_window=settings.completion_window,
    )
    saved = time.monotonic()

    builders = [MathGroupBuilder(row, course.renderer, settings.group_size) for row in rows]
    groups, dropped_rollouts = await rollout_groups(builders, policy)
    sampled = time.monotonic()

    training_groups, degenerate_groups = split_degenerate_groups(groups)
    data = []
    if training_groups:  # a step with nothing to learn from is skipped, not fatal
        advantages = compute_advantages(training_groups)
        data, _ = assemble_training_data(training_groups, advantages)
        await train_step(
            data_D=data,
            training_client=training_client,
            learning_rate=settings.learning_rate,
            num_substeps=1,
            loss_fn="importance_sampling",
            metrics={},
        )
    trained = time.monotonic()

    return {
        "step": step,
        "reward": mean_reward(groups),
        "correct": metric_rate(groups, "correct"),
        "format": metric_rate(groups, "format"),
        "degenerate_pct": 100.0 * len(degenerate_groups) / len(groups) if groups else 100.0,
        "skipped": not training_groups,
        "datums": len(data),
        "dropped_rollouts": dropped_rollouts,
        "save_s": saved - started,
        "sample_s": sampled - saved,
        "train_s": trained - sampled,
    }


async def evaluate(policy: Any, rows: list[dict], renderer: Any, samples_per_problem: int) -> dict:
    """Score `policy` on `rows` without training: reward, correct, format, and their mix.

    "correct_given_format" separates the two skills: of the well-formed answers, how
    many are right. Format alone can lift the reward by up to 0.1.
    """
    builders = [MathGroupBuilder(row, renderer, samples_per_problem) for row in rows]
    groups, dropped = await rollout_groups(builders, policy, min_successful=1)
    outcomes = rollout_metrics(groups)
    well_formed = [m for m in outcomes if m["format"]]
    return {
        "reward": mean_reward(groups),
        "correct": metric_rate(groups, "correct"),
        "format": metric_rate(groups, "format"),
        "correct_given_format": (
            sum(m["correct"] for m in well_formed) / len(well_formed) if well_formed else 0.0
        ),
        "samples": len(outcomes),
        "dropped_rollouts": dropped,
    }
