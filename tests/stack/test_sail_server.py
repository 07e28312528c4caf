"""The loopback Sail server, driven by the real `sail.SailTokenCompleter` and renderer."""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import sail
import sail.tinker
from tinker_cookbook import renderers

from helpers.scoring import extract_boxed
from local_stack.client.control_client import get_stats, set_knobs
from local_stack.engine.model import ADAPTER_CONFIG_PATH, load_base_model
from tests.sail_support import (
    HTTP,
    QUESTIONS,
    adapter_tar,
    assert_logprobs_match,
    create_body,
    load_adapter,
    make_completer,
    plant_archive,
    post_create,
    question_prompt,
    sample,
    save_adapter,
)


@pytest.fixture
def knobs(local_stack) -> Iterator[Callable[..., dict]]:
    """Set server knobs for one test; everything is switched off again afterwards."""
    yield functools.partial(set_knobs, local_stack.url)
    set_knobs(local_stack.url, latency=0.0, faults={}, seed=0)


def test_completer_samples_real_ids_with_exact_logprobs(local_stack, renderer, base):
    model, vocab = base
    questions = QUESTIONS * 4
    results = sample(make_completer(), renderer, questions)
    clean = 0
    for question, result in zip(questions, results, strict=True):
        assert vocab.to_real(vocab.to_compact(result.tokens)) == result.tokens  # real Kimi ids
        assert_logprobs_match(model, vocab, renderer, question, result)
        message, termination = renderer.parse_response(result.tokens)
        if termination.is_clean:
            clean += 1
            assert result.tokens[-1] == renderer.get_stop_sequences()[0]
            assert result.stop_reason == "stop"
    assert clean >= len(questions) // 2


def test_max_tokens_gives_length_and_greedy_is_boxed(local_stack, renderer):
    (short,) = sample(make_completer(max_tokens=3), renderer, QUESTIONS[:1])
    assert len(short.tokens) == 3 and short.stop_reason == "length"
    greedy = sample(make_completer(temperature=0.0), renderer, QUESTIONS)
    for result in greedy:
        message, termination = renderer.parse_response(result.tokens)
        assert termination.is_clean
        assert extract_boxed(renderers.get_text_content(message)) is not None


def test_auth_and_request_validation(local_stack):
    assert post_create(local_stack.url, create_body(), key=None).status == 401
    assert post_create(local_stack.url, create_body(), key="sk_wrong").status == 401
    reply = HTTP.request("GET", f"{local_stack.url}/v1/responses/resp_x")
    assert reply.status == 401
    assert (
        post_create(local_stack.url, create_body(metadata={"completion_window": "flex"})).status
        == 200
    )
    for window, words in [("asap", "not supported"), ("priority", "retired"), ("24h", "supported")]:
        reply = post_create(local_stack.url, create_body(metadata={"completion_window": window}))
        assert reply.status == 400 and words in reply.json()["error"]["message"]
    assert post_create(local_stack.url, create_body(model="other/model")).status == 404


def test_concurrent_requests_are_decoded_in_batches(local_stack, renderer):
    before = get_stats(local_stack.url)
    sample(make_completer(max_tokens=8), renderer, QUESTIONS * 8)
    after = get_stats(local_stack.url)
    # A straggler from an earlier test on the shared stack may join; 32 must not be split up.
    assert 32 <= after["requests"] - before["requests"] <= 36
    assert after["batches"] - before["batches"] <= 5


# ---------------------------------------------------------------------------------------
# LoRA adapters from the stack's own archive route.


@pytest.fixture(scope="module")
def adapter_server(local_stack, tmp_path_factory) -> tuple[dict[str, str], Path]:
    """A PEFT adapter (rank 32, random non-zero weights) as a tar and a gzipped tar, planted
    in the stack's storage: their archive URLs, and the adapter's folder."""
    peft_dir = save_adapter(tmp_path_factory.mktemp("adapter"), seed=1)
    archives = {
        "adapter.tar": adapter_tar(peft_dir),
        "adapter.tar.gz": adapter_tar(peft_dir, "w:gz"),
    }
    urls = {
        name: plant_archive(local_stack.storage_dir, local_stack.url, name.replace(".", "-"), data)
        for name, data in archives.items()
    }
    return urls, peft_dir


def test_lora_adapter_changes_outputs_exactly(local_stack, renderer, adapter_server):
    urls, peft_dir = adapter_server
    course_config = json.loads(ADAPTER_CONFIG_PATH.read_text())
    model = load_adapter(peft_dir)
    _, vocab = load_base_model()
    base_greedy = sample(make_completer(temperature=0.0), renderer, QUESTIONS)
    for archive in ("adapter.tar", "adapter.tar.gz"):
        lora_completer = make_completer(
            tinker_lora_signed_url=f"{urls[archive]}?expires=1&sig=x",
            adapter_config=course_config,
            tinker_lora_name=f"test-{archive}",
        )
        results = sample(lora_completer, renderer, QUESTIONS)
        for question, result in zip(QUESTIONS, results, strict=True):
            assert_logprobs_match(model, vocab, renderer, question, result)
    lora_greedy = sample(
        make_completer(
            temperature=0.0,
            tinker_lora_signed_url=urls["adapter.tar"],
            adapter_config=course_config,
            tinker_lora_name="test-adapter.tar",
        ),
        renderer,
        QUESTIONS,
    )
    assert [r.tokens for r in lora_greedy] != [r.tokens for r in base_greedy]


def test_mismatching_adapter_config_is_refused(local_stack, renderer, adapter_server):
    urls, _ = adapter_server
    config = {**json.loads(ADAPTER_CONFIG_PATH.read_text()), "r": 8}
    mismatched = make_completer(
        tinker_lora_signed_url=urls["adapter.tar"], adapter_config=config, tinker_lora_name="m"
    )
    with pytest.raises(sail.InferenceError, match="r: 8 != 32"):
        sample(mismatched, renderer, QUESTIONS[:1])


def test_adapter_urls_off_the_stack_are_refused(local_stack):
    metadata = {"completion_window": "balanced", "lora": "https://example.com/a.tar"}
    reply = post_create(local_stack.url, create_body(metadata=metadata))
    message = reply.json()["error"]["message"]
    assert reply.status == 400 and "adapter archive URL of this stack's Tinker" in message


# ---------------------------------------------------------------------------------------
# Knobs: latency and faults.


def test_injected_latency_reports_in_progress_until_done(local_stack, renderer, knobs, monkeypatch):
    knobs(latency=0.5)  # for this process's client, whose key the SDK sends
    key = os.environ["SAIL_API_KEY"]
    created = post_create(local_stack.url, create_body(), key=key).json()
    headers = {"Authorization": f"Bearer {key}"}
    retrieve = f"{local_stack.url}/v1/responses/{created['id']}"
    assert HTTP.request("GET", retrieve, headers=headers).json()["status"] == "in_progress"
    # The SDK sleeps 20 s between polls; only a test may shorten that.
    monkeypatch.setattr(sail.tinker, "_POLL_INTERVAL_SECONDS", 0.05)
    # The SDK polls through the injected latency (in progress above) to the completions.
    results = sample(make_completer(max_tokens=4), renderer, QUESTIONS)
    assert len(results) == len(QUESTIONS) and all(r.tokens for r in results)


@pytest.mark.parametrize(
    "fault, error, words",
    [
        ("failed", sail.InferenceError, "status failed"),
        ("expired", sail.InferenceError, "status expired"),
        ("http500", sail.errors.InferenceHTTPError, "injected fault"),
        ("malformed", sail.InferenceError, ""),
    ],
)
def test_faults_surface_as_sdk_errors(local_stack, renderer, knobs, fault, error, words):
    knobs(faults={fault: 1.0})
    with pytest.raises(error, match=words or None) as raised:
        sample(make_completer(max_tokens=4, poll_timeout=60), renderer, QUESTIONS[:1])
    assert "polling timed out" not in str(raised.value)  # the fault itself, not a hang
    if fault == "http500":
        assert raised.value.status_code == 500


def test_fault_fractions_apply_to_a_share_of_responses(local_stack, renderer, knobs):
    knobs(faults="failed=0.5", seed=3)

    async def run():
        completer = make_completer(max_tokens=4)
        prompt = question_prompt(renderer, QUESTIONS[0])
        return await asyncio.gather(*(completer(prompt) for _ in range(40)), return_exceptions=True)

    failures = sum(isinstance(r, sail.InferenceError) for r in asyncio.run(run()))
    assert 8 <= failures <= 32


# ---------------------------------------------------------------------------------------
# Lifecycle.


def test_server_is_out_of_reach_of_group_signals(local_stack):
    """Jupyter interrupts a kernel by signalling its process group; that must spare the server."""
    assert os.getpgid(local_stack.pid) != os.getpgid(0)
