"""Notebook 06's parts: the `train_latency` knob, and the notebook on both backends.

The knob must make a Tinker training step take at least its latency while leaving the
compute thread free, so Sail keeps sampling during the wait; that is what lets the
notebook's pipelined loop overlap the two. The notebook runs under papermill on the local
backend, and on the cloud code path against a local stack server, as `test_cloud_path`
does for notebook 04's loop.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
from pathlib import Path

import nbformat
import pytest
import tinker
from tinker import types

from local_stack.config import TRAIN_LATENCY_VAR, knob_settings_from_env
from local_stack.control.client import get_knobs, get_stats, set_knobs
from local_stack.control.knobs import Knobs
from tests import test_notebooks
from tests.cloud_support import cloud_kernel_env
from tests.sail_support import QUESTIONS, make_completer, sample_async
from tests.test_notebooks import (
    all_text_under,
    assert_no_key_leaks,
    finish,
    papermill,
)
from tests.tinker_datums import MODEL, rl_datum

run_env = test_notebooks.run_env  # the same fixture: fake keys, private runs/ and stack dirs

NOTEBOOK = "06_faster_loops.ipynb"
HELD_SECONDS = 6.0  # long enough that sampling 16 short rollouts ends well within it
HANG_SECONDS = 120.0


@pytest.mark.parametrize("value", [-0.5, 601, "fast", True, [1], None, "nan"])
def test_train_latency_out_of_range_is_refused_and_changes_nothing(local_stack, value):
    before = get_knobs(local_stack.url)
    with pytest.raises(urllib.error.HTTPError) as refused:
        set_knobs(local_stack.url, latency=1.0, train_latency=value)
    assert refused.value.code == 400
    assert "train_latency" in refused.value.read().decode()
    assert get_knobs(local_stack.url) == before


def test_train_latency_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(TRAIN_LATENCY_VAR, "2.5")
    assert Knobs.from_settings(knob_settings_from_env()).train_latency == 2.5


def test_a_held_step_delays_its_model_but_not_sampling(local_stack, renderer):
    """forward_backward answers at once; optim_step (the end of the step) only after the
    latency; a save queued behind it waits for it; and Sail samples in the meantime."""
    set_knobs(local_stack.url, train_latency=HELD_SECONDS)
    try:
        finished = asyncio.run(_step_while_sampling(renderer))
    finally:
        set_knobs(local_stack.url, train_latency=0.0)
    assert finished["forward_backward"] < finished["sampling"] < finished["optim_step"]
    assert HELD_SECONDS <= finished["optim_step"] <= finished["save"] < HANG_SECONDS


async def _step_while_sampling(renderer) -> dict[str, float]:
    client = await tinker.ServiceClient().create_lora_training_client_async(
        base_model=MODEL, rank=8
    )
    started = time.monotonic()
    requests = {
        "forward_backward": await client.forward_backward_async(
            [rl_datum(seed=i) for i in range(4)], "importance_sampling"
        ),
        "optim_step": await client.optim_step_async(types.AdamParams(learning_rate=1e-3)),
        "save": await client.save_weights_for_sampler_async("after-a-held-step"),
    }
    finished = {}

    async def wait(name: str) -> None:
        await requests[name].result_async()
        finished[name] = time.monotonic() - started

    async def sample() -> None:
        await sample_async(make_completer(max_tokens=8), renderer, QUESTIONS * 4)
        finished["sampling"] = time.monotonic() - started

    await asyncio.wait_for(asyncio.gather(sample(), *map(wait, requests)), HANG_SECONDS)
    return finished


# Small enough to run in about a minute and a half, with latencies long enough that the
# notebook's own timing checks hold on a busy machine.
SMALL = {
    "steps": 4,
    "group_size": 4,
    "groups_per_step": 2,
    "max_staleness": 2,
    "flex_latency_s": 3.0,
    "flex_steps": 3,
    "eval_problems": 10,
    "eval_samples": 1,
    "run_name": "papermill-small",
}


def test_notebook_runs_with_small_parameters(run_env: dict, tmp_path: Path) -> None:
    """Notebook 06's run in `make test` (see conftest.py): local backend, its own checks."""
    out = tmp_path / NOTEBOOK
    code, log = finish(papermill(NOTEBOOK, out, SMALL, run_env))
    assert code == 0, log[-3000:]
    executed = nbformat.read(out, as_version=4)
    printed = _printed(executed)
    assert "checked: every schedule within 15% of its prediction" in printed
    assert "checked: flex with k=2 within 15% of its prediction" in printed
    runs = tmp_path / "runs" / "papermill-small"
    assert (runs / "timeline.png").stat().st_size > 0
    assert len((runs / "steps.csv").read_text().splitlines()) == 1 + 3 * 4 + 3
    assert_no_key_leaks(out.read_text(), log, all_text_under(tmp_path / "runs"))


@pytest.mark.notebooks
def test_notebook_runs_unchanged_on_the_cloud_path(local_stack, tmp_path: Path) -> None:
    """backend="cloud" against a local stack server: no knob is touched, nothing simulated."""
    run_env = cloud_kernel_env(tmp_path)
    knobs_before = get_knobs(local_stack.url)
    requests_before = get_stats(local_stack.url)["requests"]
    parameters = {**SMALL, "backend": "cloud", "max_tokens": 24, "run_name": "cloud-path"}
    out = tmp_path / NOTEBOOK
    code, log = finish(papermill(NOTEBOOK, out, parameters, run_env))
    assert code == 0, log[-3000:]
    assert get_knobs(local_stack.url) == knobs_before
    printed = _printed(nbformat.read(out, as_version=4))
    # The check cell's estimate counted every rollout Sail sampled (none failed here).
    sampled = get_stats(local_stack.url)["requests"] - requests_before
    assert f"estimate: {sampled:,} rollouts, at most {sampled * 24:,} sampled tokens" in printed
    assert "backend: cloud, nothing simulated" in printed
    assert "checked:" not in printed  # the timing checks are for simulated waits only
    steps = (tmp_path / "runs" / "cloud-path" / "steps.csv").read_text().splitlines()
    assert len(steps) == 1 + 3 * 4 + 3


def _printed(executed) -> str:
    return "".join(
        output.get("text", "") for cell in executed.cells for output in cell.get("outputs", [])
    )
