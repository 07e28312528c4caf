"""Sail's sampling requests against the local stack's injected faults, with the course's retries.

sail 0.17.1 makes one attempt per `POST /v1/responses`, so `SnapshotCompleter` retries 429s,
5xxs and timeouts a bounded number of times with jittered backoff, renews a checkpoint before
a rollout could outlive it, and stops in one sentence on a refused key or a checkpoint Tinker
no longer has. Each fault is injected at a fraction of 1 for this process only.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import sail
import tinker

import helpers.serving as serving
from helpers.scoring import MathGroupBuilder
from helpers.serving import (
    ROLLOUT_TIMEOUT_S,
    SAIL_ATTEMPTS,
    CheckpointGoneError,
    SailKeyRefusedError,
    sail_policy,
)
from local_stack.client.control_client import get_stats, reset_knobs, set_knobs

MODEL = "moonshotai/Kimi-K2.6"


@pytest.fixture
def faults(local_stack, monkeypatch) -> Iterator[Any]:
    """Set this process's faults on the stack; no waiting between attempts."""
    monkeypatch.setattr(serving, "BACKOFF_S", 0.0)
    yield lambda **fractions: set_knobs(local_stack.url, faults=fractions)
    reset_knobs(local_stack.url)


@pytest.fixture
def policy_and_prompt(local_stack, renderer) -> Iterator[Any]:
    """A fresh checkpoint served by `sail_policy`, and one training prompt."""
    from local_stack.client.dataset import arithmetic_dataset

    service_client = tinker.ServiceClient()
    training_client = service_client.create_lora_training_client(base_model=MODEL, rank=32)
    row = arithmetic_dataset()["train"][0]

    async def make(
        name: str = "retries", trainer: Any = training_client, **settings: Any
    ) -> tuple[Any, Any, Any]:
        policy = await sail_policy(
            trainer,
            service_client,
            _adapter_config(),
            name,
            model_name=MODEL,
            max_tokens=8,
            temperature=1.0,
            **settings,
        )
        [env] = await MathGroupBuilder(row, renderer, group_size=1).make_envs()
        prompt, stop = await env.initial_observation()
        return policy, prompt, stop

    yield make


def _adapter_config() -> dict:
    from helpers.backend import ADAPTER_CONFIG_PATH

    return json.loads(ADAPTER_CONFIG_PATH.read_text())


@pytest.mark.parametrize(("fault", "cause"), [("http429", "429"), ("http500", "5xx")])
def test_a_fault_that_persists_is_retried_a_bounded_number_of_times(
    faults, policy_and_prompt, fault, cause
) -> None:
    async def scenario() -> Any:
        policy, prompt, stop = await policy_and_prompt()
        faults(**{fault: 1.0})
        with pytest.raises(sail.InferenceHTTPError) as raised:
            await policy(prompt, stop)
        return policy, raised.value

    policy, error = asyncio.run(scenario())
    assert error.status_code == (429 if fault == "http429" else 500)
    assert policy.retries == {cause: SAIL_ATTEMPTS - 1}


def test_a_rate_limit_now_and_then_is_retried_within_bounds(faults, policy_and_prompt) -> None:
    """A 429 in every other request: of 16 rollouts, one fails all four tries about one
    time in 16; more than 6 failing is about one chance in 10^5, no retries at all 1 in 65536."""

    async def scenario() -> Any:
        policy, prompt, stop = await policy_and_prompt()
        faults(http429=0.5)
        results = await asyncio.gather(
            *(policy(prompt, stop) for _ in range(16)), return_exceptions=True
        )
        return policy, results

    policy, results = asyncio.run(scenario())
    failed = [r for r in results if isinstance(r, BaseException)]
    assert all(isinstance(r, sail.InferenceHTTPError) and r.status_code == 429 for r in failed)
    assert policy.retries["429"] >= 1
    assert policy.retries["429"] <= 16 * (SAIL_ATTEMPTS - 1)
    assert len(failed) <= 6


def test_a_request_that_times_out_is_retried(faults, policy_and_prompt) -> None:
    async def scenario() -> Any:
        policy, prompt, stop = await policy_and_prompt()
        policy.timeout = 1.0  # the stack holds the create far longer
        faults(timeout=1.0)
        with pytest.raises(sail.InferenceHTTPError, match="timed out"):
            await policy(prompt, stop)
        return policy

    policy = asyncio.run(scenario())
    assert policy.retries == {"timeout": SAIL_ATTEMPTS - 1}


def test_a_refused_key_stops_at_once_in_one_sentence(faults, policy_and_prompt) -> None:
    async def scenario() -> Any:
        policy, prompt, stop = await policy_and_prompt()
        faults(unauthorized=1.0)
        with pytest.raises(SailKeyRefusedError) as raised:
            await policy(prompt, stop)
        return policy, str(raised.value)

    policy, message = asyncio.run(scenario())
    assert not policy.retries
    assert "SAIL_API_KEY" in message and message.count(". ") == 0
    assert sail.Config.from_env().api_key not in message


def test_an_expired_checkpoint_stops_in_one_sentence_naming_it(faults, policy_and_prompt) -> None:
    async def scenario() -> Any:
        policy, prompt, stop = await policy_and_prompt()
        faults(checkpoint_expired=1.0)
        with pytest.raises(CheckpointGoneError) as raised:
            await policy(prompt, stop)
        return policy, str(raised.value)

    policy, message = asyncio.run(scenario())
    assert policy.checkpoint_path in message
    rest = tinker.ServiceClient().create_rest_client()
    with pytest.raises(tinker.NotFoundError):
        rest.get_checkpoint_archive_url_from_tinker_path(policy.checkpoint_path).result()


def test_the_local_sail_counts_a_lora_name_sent_for_two_adapters(local_stack, policy_and_prompt):
    """What Sail does with `tinker_lora_name` is not documented; the local Sail serves by URL
    and counts a name sent again for other adapter bytes, so a collision shows."""

    async def scenario() -> tuple[int, int, int]:
        first, prompt, stop = await policy_and_prompt("name-a", lora_name="one-name")
        await first(prompt, stop)
        before = get_stats(local_stack.url)["tinker_lora_names_reused"]
        await first(prompt, stop)  # the same adapter again: not a reuse
        same = get_stats(local_stack.url)["tinker_lora_names_reused"]
        other_trainer = await tinker.ServiceClient().create_lora_training_client_async(
            base_model=MODEL, rank=32, seed=7
        )
        second, _, _ = await policy_and_prompt("name-b", other_trainer, lora_name="one-name")
        await second(prompt, stop)
        return before, same, get_stats(local_stack.url)["tinker_lora_names_reused"]

    before, same, after = asyncio.run(scenario())
    assert same == before and after == before + 1


def test_a_flex_rollout_never_meets_an_expired_checkpoint(monkeypatch) -> None:
    """On a simulated clock, one flex completer serves rollouts back to back for three days,
    each taking a flex rollout's whole budget: whenever one starts, the checkpoint's TTL (as
    last set with Tinker) outlasts it. A fixed 3,600 s TTL would fail the first."""
    clock = SimpleNamespace(now=0.0, expires_at=0.0, starts=0)

    async def signed_url(service_client: Any, path: str, *, ttl_seconds: int) -> str:
        clock.expires_at = clock.now + ttl_seconds  # the helper sets the TTL, then signs
        return f"https://example.invalid/archive?renewed-at={clock.now}"

    async def flex_rollout(self: Any, model_input: Any, stop: Any = None) -> str:
        assert clock.expires_at >= clock.now + ROLLOUT_TIMEOUT_S["flex"], clock
        clock.starts += 1
        clock.now += ROLLOUT_TIMEOUT_S["flex"]
        return "sampled"

    class Saved:
        path = "tinker://run/sampler_weights/step-0"

    class TrainingClient:
        async def save_weights_for_sampler_async(self, name: str, ttl_seconds: int) -> Any:
            clock.expires_at = clock.now + ttl_seconds

            async def saved() -> Saved:
                return Saved()

            return saved()

    monkeypatch.setattr(sail, "get_tinker_checkpoint_signed_url_async", signed_url)
    monkeypatch.setattr(sail.SailTokenCompleter, "__call__", flex_rollout)

    async def three_days() -> Any:
        policy = await sail_policy(
            TrainingClient(),
            None,
            {"r": 32},
            "step-0",
            model_name=MODEL,
            max_tokens=8,
            temperature=1.0,
            completion_window="flex",
            ttl_seconds=3600,
        )
        policy.clock, policy.expires_at = (lambda: clock.now), clock.expires_at
        while clock.now < 3 * 24 * 3600:
            assert await policy("prompt") == "sampled"
        return policy

    policy = asyncio.run(three_days())
    assert clock.starts == 6 and policy.renewals >= 2
