"""Notebook 03_one_grpo_step: its check cell (run here) refuses bad parameters, and its
direction check (one step makes positive-advantage completions likelier, negative ones less
likely) holds across seeds and the settings its "Try this" suggests. Its cloud run is in
tests/notebooks/test_one_grpo_step_cloud.py, its other "Try this" runs in
tests/long/test_exercises.py.
"""

from __future__ import annotations

import asyncio

import pytest
from tinker_cookbook.rl.train import train_step

from helpers.errors import CourseConfigError
from scripts.step_effect import measure_one_step
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
        async def train_once(client, data_D) -> None:
            await train_step(data_D, client, learning_rate, 1, "importance_sampling")

        effect = await measure_one_step(
            course,
            seed,
            train_once,
            name="sweep",
            max_tokens=course.defaults["max_tokens"],
            temperature=temperature,
        )
        return effect.positive, effect.negative

    async def sweep() -> dict:
        # All at once: the stack batches their sampling, as it would for one notebook's groups.
        keys = [(lr, t, seed) for lr, t, seeds in SWEEP for seed in seeds]
        changes = await asyncio.gather(*(mean_changes(seed, lr, t) for lr, t, seed in keys))
        return dict(zip(keys, changes, strict=True))

    results = asyncio.run(sweep())
    failed = {k: v for k, v in results.items() if not v[0] > 0 > v[1]}
    assert not failed, f"(learning rate, temperature, seed): (positive, negative) = {failed}"
