"""The `train_latency` knob notebook 07 simulates Tinker's step time with: it must make a
training step take at least its latency while leaving the compute thread free, so that Sail
keeps sampling during the wait; that is what lets the notebook's pipelined loop overlap the
two. Refused values change nothing.
"""

from __future__ import annotations

import asyncio

import pytest
import tinker
from tinker import types

from local_stack.client.control_client import get_knobs, set_knobs
from local_stack.config import TRAIN_LATENCY_VAR, knob_settings_from_env
from local_stack.control.knobs import Knobs
from tests.sail_support import QUESTIONS, make_completer, sample_async
from tests.tinker_datums import MODEL, rl_datum

HELD_SECONDS = 15.0  # long enough that sampling 16 short rollouts ends within it, even
# on a loaded machine
HANG_SECONDS = 120.0  # a bound against a hang only


@pytest.mark.parametrize("value", [-0.5, 601, "fast", True, [1], None, "nan"])
def test_train_latency_out_of_range_is_refused_and_changes_nothing(local_stack, value):
    before = get_knobs(local_stack.url)
    with pytest.raises(ValueError, match=r"^train_latency must be"):  # the stack's 400, in words
        set_knobs(local_stack.url, latency=1.0, train_latency=value)
    assert get_knobs(local_stack.url) == before


def test_train_latency_is_read_from_the_environment(monkeypatch):
    monkeypatch.setenv(TRAIN_LATENCY_VAR, "2.5")
    assert Knobs.from_settings(knob_settings_from_env()).train_latency == 2.5


def test_a_held_step_delays_its_model_but_not_sampling(local_stack, renderer):
    """forward_backward answers while the step is held, optim_step (the end of the step) only
    once it is over, a save queued behind it after that, and Sail samples meanwhile. The
    order of the answers says so; no wall-clock duration is asserted. (Which of
    forward_backward and the sampling ends first is a race: both run at once.)"""
    set_knobs(local_stack.url, train_latency=HELD_SECONDS)
    try:
        order = asyncio.run(_step_while_sampling(renderer))
    finally:
        set_knobs(local_stack.url, train_latency=0.0)
    assert set(order[:2]) == {"forward_backward", "sampling"}, order
    assert order[2:] == ["optim_step", "save"], order


async def _step_while_sampling(renderer) -> list[str]:
    """The requests of one held training step and a sampling batch, in the order they
    answered."""
    client = await tinker.ServiceClient().create_lora_training_client_async(
        base_model=MODEL, rank=8
    )
    requests = {
        "forward_backward": await client.forward_backward_async(
            [rl_datum(seed=i) for i in range(4)], "importance_sampling"
        ),
        "optim_step": await client.optim_step_async(types.AdamParams(learning_rate=1e-3)),
        "save": await client.save_weights_for_sampler_async("after-a-held-step"),
    }
    order: list[str] = []

    async def wait(name: str) -> None:
        await requests[name].result_async()
        order.append(name)

    async def sample() -> None:
        await sample_async(make_completer(max_tokens=8), renderer, QUESTIONS * 4)
        order.append("sampling")

    await asyncio.wait_for(asyncio.gather(sample(), *map(wait, requests)), HANG_SECONDS)
    return order
