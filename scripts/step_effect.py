"""What one GRPO step does to the completions it trained on, from a fresh adapter and a seed.

Notebook 03's step set up outside the notebook, for the test that checks its direction
across seeds (tests/course/test_one_grpo_step.py) and the script that measures its spread
(scripts/one_step_spread.py). The step itself is the caller's: the test uses the cookbook's
`train_step`, the script the notebook's own optimizer settings.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tinker
import torch
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages

from helpers.inspect_step import completion_logprob_changes, learner_logprobs, sample_with_spread
from helpers.serving import sail_policy

if TYPE_CHECKING:
    from helpers.backend import Course

# One optimizer step on the batch: (training client, data) -> anything, awaited.
TrainOnce = Callable[[Any, list[tinker.Datum]], Awaitable[object]]


@dataclass
class StepEffect:
    """One step's batch, its logprobs after the step, and the mean move per advantage sign."""

    data_D: list[tinker.Datum]
    after_D: list[torch.Tensor]  # learner logprobs per target token, after the step
    positive: float  # mean change in total logprob of positive-advantage completions (nats)
    negative: float  # the same for negative-advantage completions


async def measure_one_step(
    course: Course,
    seed: int,
    train_once: TrainOnce,
    *,
    name: str,
    max_tokens: int,
    temperature: float,
    groups: int = 16,
    group_size: int = 8,
) -> StepEffect:
    """Sample `groups` x `group_size` from a fresh seeded adapter, step once, measure the move.

    `name` prefixes the Sail adapter's name, made unique per call.
    """
    client = await course.service_client.create_lora_training_client_async(
        base_model=course.model_name, rank=course.adapter_config["r"], seed=seed
    )
    policy = await sail_policy(
        client,
        course.service_client,
        course.adapter_config,
        f"{name}-{seed}-{time.time_ns()}",
        model_name=course.model_name,
        max_tokens=max_tokens,
        temperature=temperature,
    )
    sampled = await sample_with_spread(policy, course, random.Random(seed), groups, group_size)
    advantages_P = compute_advantages(sampled)
    data_D, metadata_D = assemble_training_data(sampled, advantages_P)
    advantage_D = [float(advantages_P[m["group_idx"]][m["traj_idx"]]) for m in metadata_D]
    before_D = await learner_logprobs(client, data_D)
    await train_once(client, data_D)
    after_D = await learner_logprobs(client, data_D)
    change_D = completion_logprob_changes(data_D, before_D, after_D)
    positive = [c for c, a in zip(change_D, advantage_D, strict=True) if a > 0]
    negative = [c for c, a in zip(change_D, advantage_D, strict=True) if a < 0]
    return StepEffect(
        data_D=data_D,
        after_D=after_D,
        positive=sum(positive) / len(positive),
        negative=sum(negative) / len(negative),
    )
