"""Notebook 09 under papermill: locally (its solved run) it trains a short run when there is
none and ships it; on the cloud path (against the local stack) it ships a run notebook 04
would have left.
(The upload flow and the notebook's parameter checks are tests/course/test_ship_adapter.py.)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import nbformat
import tinker

from helpers.scoring import MathGroupBuilder
from helpers.training import LoopSettings, run_step
from local_stack.client.control_client import get_stats
from local_stack.client.dataset import arithmetic_dataset
from local_stack.engine.model import ADAPTER_CONFIG_PATH, BASE_MODEL_NAME
from notebook_ui.display import quiet_tinker_deprecation_logs
from tests.cloud_support import cloud_kernel_env
from tests.notebook_support import (
    all_text_under,
    assert_every_check_passes,
    assert_no_key_leaks,
    error_outputs,
    finish,
    papermill,
    small,
    solved_copy,
)

NOTEBOOK = "09_ship_the_adapter.ipynb"
COURSE_CONFIG = json.loads(ADAPTER_CONFIG_PATH.read_text())


def outputs_text(path: Path) -> tuple[str, list]:
    executed = nbformat.read(path, as_version=4)
    text = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    return text, error_outputs(executed)


SMALL = small(NOTEBOOK, run_name="ship-test", lora_name="ship-test")


def test_notebook_trains_a_short_run_when_none_exists(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    """The solved notebook (`make solutions`' copy): its run is also notebook 09's solved run,
    so every exercise's check must pass too."""
    out = tmp_path / NOTEBOOK
    solved = solved_copy(NOTEBOOK.removesuffix(".ipynb"), tmp_path / "solutions")
    code, log = finish(papermill(str(solved), out, SMALL, shared_stack_env))
    assert code == 0, log[-3000:]
    assert_every_check_passes(nbformat.read(out, as_version=4), NOTEBOOK.removesuffix(".ipynb"))
    text, errors = outputs_text(out)
    assert not errors
    assert "no usable run 'ship-test': training 2 steps here" in text
    assert "Sail, Tinker forward and peft agree within 1e-4" in text
    assert "merged vs un-merged adapter" in text
    assert "'deleted': True" in text and "HTTP 404 from GET /v1/loras/ship-test" in text
    adapter = tmp_path / "runs" / "ship-test" / "adapter"
    assert (adapter / "peft" / "adapter_model.safetensors").exists()
    assert not (adapter / "archive.tar").exists()  # deleted once unpacked
    assert_no_key_leaks(out.read_text(), log, all_text_under(tmp_path / "runs"))


def test_notebook_runs_unchanged_on_the_cloud_path_with_an_existing_run(
    local_stack, renderer, tmp_path: Path
) -> None:
    """backend="cloud" against the local stack (the SDKs' URLs and keys point at it), shipping
    a run that notebook 04 would have left: a state.json with its checkpoint."""
    runs = tmp_path / "runs"
    checkpoint = asyncio.run(_train_and_save_state(renderer))
    (runs / "seeded").mkdir(parents=True)
    state = {"completed_steps": 2, "checkpoint": checkpoint, "eval_before": {"reward": 0.3}}
    (runs / "seeded" / "state.json").write_text(json.dumps(state))
    env = cloud_kernel_env(tmp_path)
    parameters = {**SMALL, "backend": "cloud", "run_name": "seeded", "max_tokens": 32}
    out = tmp_path / NOTEBOOK
    requests_before = get_stats(local_stack.url)["requests"]
    code, log = finish(papermill(NOTEBOOK, out, parameters, env))
    assert code == 0, log[-3000:]
    text, errors = outputs_text(out)
    assert not errors
    # The estimate's parity and comparison parts are what Sail sampled: a run was shipped, so
    # the short run it also counts (2 steps of 64) was not needed.
    parity = 2 * SMALL["parity_problems"]
    compared = 2 * SMALL["eval_problems"] * SMALL["eval_samples"]
    assert get_stats(local_stack.url)["requests"] - requests_before == parity + compared
    assert f"estimate: {2 * 64 + parity + compared:,} rollouts" in text
    assert f"shipping the adapter of run 'seeded' after 2 steps ({checkpoint})" in text
    assert "closer to the adapter's than to the base model's" in text
    assert "cloud backend: the base model's weights are not on this machine" in text
    assert "local backend" not in text  # no local-only cell ran


async def _train_and_save_state(renderer) -> str:
    """Two GRPO steps on the local stack, saved with save_state, as notebook 04 leaves a run."""
    quiet_tinker_deprecation_logs()  # notebook 02 explains the signed-URL deprecation
    course = SimpleNamespace(
        service_client=tinker.ServiceClient(),
        adapter_config=COURSE_CONFIG,
        model_name=BASE_MODEL_NAME,
        renderer=renderer,
    )
    client = await course.service_client.create_lora_training_client_async(
        base_model=BASE_MODEL_NAME, rank=COURSE_CONFIG["r"]
    )
    settings = LoopSettings(
        run_name="seeded",
        group_size=8,
        learning_rate=5e-3,
        max_tokens=24,
        temperature=1.0,
        completion_window="balanced",
    )
    rows = arithmetic_dataset()["train"].to_list()
    for step in range(2):
        builders = [MathGroupBuilder(row, renderer, 8) for row in rows[8 * step : 8 * step + 8]]
        await run_step(step, builders, settings, client, course)
    return (await (await client.save_state_async("seeded-state"))).path
