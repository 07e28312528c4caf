"""Notebook 03_one_grpo_step: its check cell (run here) refuses bad parameters, and its
direction check (one step makes positive-advantage completions likelier, negative ones less
likely) holds across seeds and the settings its "Try this" suggests. Its cloud run and its
other "Try this" runs are in tests/notebooks/ (test_one_grpo_step_cloud.py, test_exercises.py).
"""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.train import train_step

from helpers.errors import CourseConfigError
from helpers.inspect_step import completion_logprob_changes, learner_logprobs, sample_with_spread
from helpers.serving import sail_policy
from tests.check_cells_support import run_check_cells

NOTEBOOK = "03_one_grpo_step.ipynb"


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("groups", 0, "groups must be a whole number from 1 to 1074"),
        ("group_size", 1, "group_size must be a whole number from 2 to 64"),
        ("learning_rate", 0, "learning_rate must be a number greater than 0 and at most 1"),
    ],
)
def test_bad_parameter_fails_in_the_check_cell(name: str, value: object, expected: str) -> None:
    checked = run_check_cells(NOTEBOOK, **{name: value})
    assert isinstance(checked.error, CourseConfigError) and expected in str(checked.error)


# (learning rate, temperature, seeds): the defaults, and two "Try this" settings.
SWEEP = [(1e-4, 1.0, range(6)), (3e-4, 1.0, range(3)), (1e-4, 0.7, range(3))]


def test_one_step_moves_completions_the_right_way_across_seeds(local_stack) -> None:
    """The notebook's direction check, with the cookbook's own `train_step` doing the step."""
    import helpers.backend

    course = helpers.backend.connect("local")

    async def mean_changes(seed: int, learning_rate: float, temperature: float):
        client = await course.service_client.create_lora_training_client_async(
            base_model=course.model_name, rank=course.adapter_config["r"], seed=seed
        )
        policy = await sail_policy(
            client,
            course.service_client,
            course.adapter_config,
            f"sweep-{seed}-{time.time_ns()}",
            model_name=course.model_name,
            max_tokens=course.defaults["max_tokens"],
            temperature=temperature,
        )
        groups = await sample_with_spread(policy, course, random.Random(seed), 16, 8)
        advantages_P = compute_advantages(groups)
        data_D, metadata_D = assemble_training_data(groups, advantages_P)
        advantages = [float(advantages_P[m["group_idx"]][m["traj_idx"]]) for m in metadata_D]
        before_D = await learner_logprobs(client, data_D)
        await train_step(data_D, client, learning_rate, 1, "importance_sampling")
        after_D = await learner_logprobs(client, data_D)
        changes = completion_logprob_changes(data_D, before_D, after_D)
        up = [c for c, a in zip(changes, advantages, strict=True) if a > 0]
        down = [c for c, a in zip(changes, advantages, strict=True) if a < 0]
        return sum(up) / len(up), sum(down) / len(down)

    async def sweep() -> dict:
        # All at once: the stack batches their sampling, as it would for one notebook's groups.
        keys = [(lr, t, seed) for lr, t, seeds in SWEEP for seed in seeds]
        changes = await asyncio.gather(*(mean_changes(seed, lr, t) for lr, t, seed in keys))
        return dict(zip(keys, changes, strict=True))

    results = asyncio.run(sweep())
    failed = {k: v for k, v in results.items() if not v[0] > 0 > v[1]}
    assert not failed, f"(learning rate, temperature, seed): (positive, negative) = {failed}"
