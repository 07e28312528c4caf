"""Notebook 03_one_grpo_step: it fails fast on bad parameters, runs unchanged with
backend="cloud" against the local stack (its last "Try this"), and its direction check (one
step makes positive-advantage completions likelier, negative ones less likely) holds across
seeds and the settings its "Try this" suggests. Its other "Try this" runs, each checked for
the change it announces, are in tests/test_exercises.py.
"""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import nbformat
import pytest
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.train import train_step

from helpers.inspect_step import completion_logprob_changes, learner_logprobs, sample_with_spread
from helpers.serving import sail_policy
from tests.cloud_support import cloud_kernel_env
from tests.notebook_support import finish, papermill

NOTEBOOK = "03_one_grpo_step.ipynb"


def outputs(path: Path) -> tuple[str, list]:
    """All printed text of an executed notebook, and its error outputs."""
    cells = nbformat.read(path, as_version=4).cells
    found = [o for c in cells for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in found)
    return text, [o for o in found if o.output_type == "error"]


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("groups", 0, "groups must be a whole number from 1 to 1074"),
        ("group_size", 1, "group_size must be a whole number from 2 to 64"),
        ("learning_rate", 0, "learning_rate must be a number greater than 0 and at most 1"),
    ],
)
def test_bad_parameter_fails_in_the_check_cell(
    name: str, value: object, expected: str, run_env: dict, tmp_path: Path
) -> None:
    out = tmp_path / "out.ipynb"
    code, _ = finish(papermill(NOTEBOOK, out, {name: value}, run_env))
    assert code != 0
    [error] = outputs(out)[1]
    assert error.ename == "CourseConfigError" and expected in error.evalue


def test_cloud_backend_runs_unchanged_against_the_local_stack(local_stack, tmp_path: Path) -> None:
    """backend="cloud" with the SDKs' endpoints pointed at a local stack (as the
    `local_stack` fixture leaves them): the notebook is not changed, only its kernel gets
    the two stand-ins above."""
    env = cloud_kernel_env(tmp_path)
    assert env["TINKER_BASE_URL"] == env["SAIL_API_URL"] == local_stack.url
    out = tmp_path / NOTEBOOK
    code, log = finish(papermill(NOTEBOOK, out, {"backend": "cloud"}, env))
    assert code == 0, log[-3000:]
    text, errors = outputs(out)
    assert not errors
    assert "backend: cloud   learning rate: 0.0005   max_tokens: 1024" in text
    assert "mean change" in text and "PEFT agrees" in text
    assert "completion tokens; weights from" in text  # what the bullet asks about, printed


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
