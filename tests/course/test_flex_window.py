"""A rollout waits as long as its completion window may take, and the prose says what flex is.

Sail's completion-window page gives `flex` no target response time (it runs when compute is
cheapest), so a fixed 600 s, or the SDK's fixed 20-minute poll, would fail a healthy flex
run. Each window's wait comes from `helpers.serving.ROLLOUT_TIMEOUT_S`, for the SDK's poll
and for the cookbook's per-rollout timeout alike.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import sail

import helpers.training as training
from helpers.params import COMPLETION_WINDOWS
from helpers.serving import ROLLOUT_TIMEOUT_S, sail_policy


def test_every_window_has_a_wait_and_flex_waits_hours_longer_than_balanced() -> None:
    assert set(ROLLOUT_TIMEOUT_S) == set(COMPLETION_WINDOWS)
    assert ROLLOUT_TIMEOUT_S["balanced"] == 600
    assert ROLLOUT_TIMEOUT_S["flex"] >= 3600 > ROLLOUT_TIMEOUT_S["balanced"]


class _Saved:
    path = "tinker://run/sampler_weights/step-0"


class _TrainingClient:
    async def save_weights_for_sampler_async(self, name: str, ttl_seconds: int) -> Any:
        async def saved() -> _Saved:
            return _Saved()

        return saved()


@pytest.mark.parametrize("window", COMPLETION_WINDOWS)
def test_sail_policy_polls_sail_for_as_long_as_its_window_may_take(window, monkeypatch) -> None:
    async def signed_url(service_client: Any, path: str, *, ttl_seconds: int) -> str:
        return "https://example.invalid/archive"

    monkeypatch.setattr(sail, "get_tinker_checkpoint_signed_url_async", signed_url)
    policy = asyncio.run(
        sail_policy(
            _TrainingClient(),
            None,
            {"r": 32},
            "step-0",
            model_name="moonshotai/Kimi-K2.6",
            max_tokens=8,
            temperature=1.0,
            completion_window=window,
        )
    )
    assert policy.poll_timeout == ROLLOUT_TIMEOUT_S[window]


@pytest.mark.parametrize("window", COMPLETION_WINDOWS)
def test_each_rollout_may_take_as_long_as_its_window(window, monkeypatch) -> None:
    timeouts: list[float] = []

    class Strategy:
        def __init__(self, min_successful: int, max_retries: int, per_rollout_timeout: float):
            timeouts.append(per_rollout_timeout)

    async def rollout(builder: Any, policy: Any, strategy: Any) -> Any:
        await policy("prompt", None)
        return SimpleNamespace(rollout_errors=[])

    class Policy:
        completion_window = window

        async def __call__(self, model_input: Any, stop: Any) -> str:
            return "answer"

    monkeypatch.setattr(training, "MinViableGroup", Strategy)
    monkeypatch.setattr(training, "do_group_rollout", rollout)
    groups, dropped = asyncio.run(
        training.rollout_groups([SimpleNamespace(group_size=2)], Policy())
    )
    assert (len(groups), dropped) == (1, 0)
    assert timeouts == [ROLLOUT_TIMEOUT_S[window]]


def test_the_sdk_still_offers_no_way_to_cancel_an_abandoned_response() -> None:
    """Notebook 07 says a timed-out request cannot be cancelled through the SDK, so Sail may
    still bill it. Sail's API reference documents a cancel route, but sail 0.17.1 exposes
    only create and retrieve, and `SailTokenCompleter` keeps the response id to itself. When
    this fails, the SDK has gained a cancel: use it for timed-out rollouts, and fix 06."""
    public = {name for name in dir(sail.inference.responses) if not name.startswith("_")}
    assert public == {"create", "retrieve"}
