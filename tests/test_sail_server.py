"""The loopback Sail server, driven by the real `sail.SailTokenCompleter` and renderer."""

from __future__ import annotations

import asyncio
import functools
import http.server
import json
import os
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import peft
import pytest
import sail
import sail.tinker
import torch
import urllib3
from tinker_cookbook import renderers

from helpers.scoring import QUESTION_SUFFIX, extract_boxed
from local_stack.engine.model import (
    ADAPTER_CONFIG_PATH,
    BASE_MODEL_NAME,
    adapter_config_for,
    load_base_model,
)

QUESTIONS = [
    "Tom has 3 apples and buys 4 more. How many apples does Tom have now?",
    "What is 12 minus 5?",
    "A shelf holds 9 books and 8 more books are added. How many books are on the shelf?",
    "Sara has 17 stickers and gives away 12. How many stickers does Sara have left?",
]
HTTP = urllib3.PoolManager(retries=False)


@pytest.fixture
def knobs(local_stack) -> Iterator[Callable[..., dict]]:
    """Set server knobs for one test; everything is switched off again afterwards."""

    def set_knobs(**changes: object) -> dict:
        reply = HTTP.request("POST", f"{local_stack.url}/local/config", json=changes)
        assert reply.status == 200, reply.data
        return reply.json()

    yield set_knobs
    set_knobs(latency=0.0, faults={}, seed=0)


def _prompt(renderer, question: str):
    convo = [{"role": "user", "content": question + QUESTION_SUFFIX}]
    return renderer.build_generation_prompt(convo)


def _completer(**overrides) -> sail.SailTokenCompleter:
    settings = {"model": BASE_MODEL_NAME, "max_tokens": 48, "temperature": 1.0, "poll_timeout": 30}
    return sail.SailTokenCompleter(**{**settings, **overrides})


def _sample(completer, renderer, questions):
    async def run():
        stop = renderer.get_stop_sequences()
        return await asyncio.gather(
            *(completer(_prompt(renderer, q), stop=stop) for q in questions)
        )

    return asyncio.run(run())


def _assert_logprobs_match(model, vocab, renderer, question, result) -> None:
    """The served logprobs are the model's own, recomputed here with one forward pass."""
    prompt = vocab.to_compact(_prompt(renderer, question).to_ints())
    tokens = vocab.to_compact(result.tokens)
    with torch.no_grad():
        logits_TV = model(input_ids=torch.tensor([prompt + tokens])).logits[0]
    logp_TV = torch.log_softmax(logits_TV[len(prompt) - 1 : -1], dim=-1)
    expected = logp_TV.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
    assert (torch.tensor(result.maybe_logprobs) - expected).abs().max() <= 1e-4


def test_completer_samples_real_ids_with_exact_logprobs(local_stack, renderer, base):
    model, vocab = base
    questions = QUESTIONS * 4
    results = _sample(_completer(), renderer, questions)
    clean = 0
    for question, result in zip(questions, results, strict=True):
        assert vocab.to_real(vocab.to_compact(result.tokens)) == result.tokens  # real Kimi ids
        _assert_logprobs_match(model, vocab, renderer, question, result)
        message, termination = renderer.parse_response(result.tokens)
        if termination.is_clean:
            clean += 1
            assert result.tokens[-1] == renderer.get_stop_sequences()[0]
            assert result.stop_reason == "stop"
    assert clean >= len(questions) // 2


def test_max_tokens_gives_length_and_greedy_is_boxed(local_stack, renderer):
    (short,) = _sample(_completer(max_tokens=3), renderer, QUESTIONS[:1])
    assert len(short.tokens) == 3 and short.stop_reason == "length"
    greedy = _sample(_completer(temperature=0.0), renderer, QUESTIONS)
    for result in greedy:
        message, termination = renderer.parse_response(result.tokens)
        assert termination.is_clean
        assert extract_boxed(renderers.get_text_content(message)) is not None


def _post(url: str, body: dict, key: str | None = "sk_local_stack"):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return HTTP.request("POST", f"{url}/v1/responses", json=body, headers=headers)


def _body(**overrides) -> dict:
    body = {
        "model": BASE_MODEL_NAME,
        "background": True,
        "raw_prompt_tokens": [163594, 14062, 163601],
        "max_output_tokens": 4,
        "metadata": {"completion_window": "balanced"},
    }
    return {**body, **overrides}


def test_auth_and_request_validation(local_stack):
    assert _post(local_stack.url, _body(), key=None).status == 401
    assert _post(local_stack.url, _body(), key="sk_wrong").status == 401
    reply = HTTP.request("GET", f"{local_stack.url}/v1/responses/resp_x")
    assert reply.status == 401
    assert _post(local_stack.url, _body(metadata={"completion_window": "flex"})).status == 200
    for window, words in [("asap", "not supported"), ("priority", "retired"), ("24h", "supported")]:
        reply = _post(local_stack.url, _body(metadata={"completion_window": window}))
        assert reply.status == 400 and words in reply.json()["error"]["message"]
    assert _post(local_stack.url, _body(model="other/model")).status == 404


def test_concurrent_requests_are_decoded_in_batches(local_stack, renderer):
    before = HTTP.request("GET", f"{local_stack.url}/local/stats").json()
    _sample(_completer(max_tokens=8), renderer, QUESTIONS * 8)
    after = HTTP.request("GET", f"{local_stack.url}/local/stats").json()
    # A straggler from an earlier test on the shared stack may join; 32 must not be split up.
    assert 32 <= after["requests"] - before["requests"] <= 36
    assert after["batches"] - before["batches"] <= 5


# ---------------------------------------------------------------------------------------
# LoRA adapters from a loopback file server.


@pytest.fixture(scope="module")
def adapter_server(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """A PEFT adapter (rank 32, random non-zero weights) as .tar and .tar.gz, served over HTTP."""
    root = tmp_path_factory.mktemp("adapters")
    base, _ = load_base_model()
    config = adapter_config_for(32)
    config.init_lora_weights = False  # random B too, so the adapter changes the outputs
    torch.manual_seed(1)
    peft.get_peft_model(base, config).save_pretrained(root / "peft", save_embedding_layers=False)
    for name, mode in [("adapter.tar", "w"), ("adapter.tar.gz", "w:gz")]:
        with tarfile.open(root / name, mode) as tar:
            for file in ("adapter_config.json", "adapter_model.safetensors"):
                tar.add(root / "peft" / file, arcname=file)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root / "peft"
    server.shutdown()


def test_lora_adapter_changes_outputs_exactly(local_stack, renderer, adapter_server):
    url, peft_dir = adapter_server
    course_config = json.loads(ADAPTER_CONFIG_PATH.read_text())
    model = peft.PeftModel.from_pretrained(load_base_model()[0], peft_dir).eval()
    _, vocab = load_base_model()
    base_greedy = _sample(_completer(temperature=0.0), renderer, QUESTIONS)
    for archive in ("adapter.tar", "adapter.tar.gz"):
        completer = _completer(
            tinker_lora_signed_url=f"{url}/{archive}?expires=1&sig=x",
            adapter_config=course_config,
            tinker_lora_name=f"test-{archive}",
        )
        results = _sample(completer, renderer, QUESTIONS)
        for question, result in zip(QUESTIONS, results, strict=True):
            _assert_logprobs_match(model, vocab, renderer, question, result)
    lora_greedy = _sample(
        _completer(
            temperature=0.0,
            tinker_lora_signed_url=f"{url}/adapter.tar",
            adapter_config=course_config,
            tinker_lora_name="test-adapter.tar",
        ),
        renderer,
        QUESTIONS,
    )
    assert [r.tokens for r in lora_greedy] != [r.tokens for r in base_greedy]


def test_mismatching_adapter_config_is_refused(local_stack, renderer, adapter_server):
    url, _ = adapter_server
    config = {**json.loads(ADAPTER_CONFIG_PATH.read_text()), "r": 8}
    completer = _completer(
        tinker_lora_signed_url=f"{url}/adapter.tar", adapter_config=config, tinker_lora_name="m"
    )
    with pytest.raises(sail.InferenceError, match="r: 8 != 32"):
        _sample(completer, renderer, QUESTIONS[:1])


def test_non_loopback_adapter_hosts_are_refused(local_stack):
    metadata = {"completion_window": "balanced", "lora": "https://example.com/a.tar"}
    reply = _post(local_stack.url, _body(metadata=metadata))
    assert reply.status == 400 and "non-loopback" in reply.json()["error"]["message"]


# ---------------------------------------------------------------------------------------
# Knobs: latency and faults.


def test_injected_latency_reports_in_progress_until_done(local_stack, renderer, knobs, monkeypatch):
    knobs(latency=0.5)
    created = _post(local_stack.url, _body()).json()
    headers = {"Authorization": "Bearer sk_local_stack"}
    retrieve = f"{local_stack.url}/v1/responses/{created['id']}"
    assert HTTP.request("GET", retrieve, headers=headers).json()["status"] == "in_progress"
    # The SDK sleeps 20 s between polls; only a test may shorten that.
    monkeypatch.setattr(sail.tinker, "_POLL_INTERVAL_SECONDS", 0.05)
    started = time.monotonic()
    _sample(_completer(max_tokens=4), renderer, QUESTIONS)
    assert 0.5 <= time.monotonic() - started < 3


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
    started = time.monotonic()
    with pytest.raises(error, match=words or None) as raised:
        _sample(_completer(max_tokens=4, poll_timeout=10), renderer, QUESTIONS[:1])
    assert time.monotonic() - started < 10
    if fault == "http500":
        assert raised.value.status_code == 500


def test_fault_fractions_apply_to_a_share_of_responses(local_stack, renderer, knobs):
    knobs(faults="failed=0.5", seed=3)

    async def run():
        completer = _completer(max_tokens=4)
        prompt = _prompt(renderer, QUESTIONS[0])
        return await asyncio.gather(*(completer(prompt) for _ in range(40)), return_exceptions=True)

    failures = sum(isinstance(r, sail.InferenceError) for r in asyncio.run(run()))
    assert 8 <= failures <= 32


# ---------------------------------------------------------------------------------------
# Lifecycle.


def test_server_is_out_of_reach_of_group_signals(local_stack):
    """Jupyter interrupts a kernel by signalling its process group; that must spare the server."""
    assert os.getpgid(local_stack.pid) != os.getpgid(0)
