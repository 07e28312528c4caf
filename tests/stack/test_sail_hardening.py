"""Hostile and careless input to the local Sail server and its control plane.

Each class of bad input must end in a 4xx naming the problem, change nothing, and leave the
well-formed requests sent at the same time with exactly the samples they would have had.
"""

from __future__ import annotations

import asyncio
import functools
import json

import pytest
import torch

from local_stack.client.control_client import get_knobs
from local_stack.config import SAIL_API_KEY
from local_stack.engine.model import BASE_MODEL_NAME
from local_stack.engine.sampler import SamplingParams, sample_batch
from local_stack.sail.batcher import Batcher, Job
from tests.sail_support import (
    HTTP,
    KEY_HEADER,
    QUESTIONS,
    alongside_good_requests,
    create_body,
    make_completer,
    post_create,
    question_prompt,
)


def _raw_create(url: str, data: bytes, content_type: str = "application/json"):
    headers = {**KEY_HEADER, "Content-Type": content_type}
    return HTTP.request("POST", f"{url}/v1/responses", body=data, headers=headers)


def _assert_refused(reply, status: int, words: str, param: str | None = None) -> None:
    assert reply.status == status, (reply.status, reply.data[:300])
    error = json.loads(reply.data)["error"]
    assert words in error["message"], error
    if param is not None:
        assert error["param"] == param, error


# ---------------------------------------------------------------------------------------
# One request's sampling values cannot fail anyone else's.

UNSAFE_SAMPLING = [
    ({"temperature": 5e-324}, "temperature"),  # subnormal: logits / T overflow to inf
    ({"temperature": 1e-5}, "temperature"),
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": 2.5}, "temperature"),
    ({"temperature": True}, "temperature"),
    ({"temperature": "1.0"}, "temperature"),
    ({"top_p": 1e-300}, "top_p"),  # rounds to 0 in float32 and would drop every token
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_p": None}, "top_p"),
]


def test_unsafe_sampling_values_are_refused_while_others_sample(local_stack, renderer, base):
    model, vocab = base
    calls = [
        functools.partial(post_create, local_stack.url, create_body(**fields))
        for fields, _ in UNSAFE_SAMPLING
    ]
    nan = json.dumps(create_body()).replace('"max_output_tokens": 4', '"temperature": NaN')
    calls.append(functools.partial(_raw_create, local_stack.url, nan.encode()))
    replies = alongside_good_requests(renderer, make_completer(), model, vocab, calls)
    for (_, param), reply in zip(UNSAFE_SAMPLING, replies, strict=False):
        words = "0 (greedy) or between 0.01 and 2" if param == "temperature" else "between 0.001"
        _assert_refused(reply, 400, words, param)
    _assert_refused(replies[-1], 400, "NaN is not a JSON value")


def test_a_failing_request_fails_alone_in_its_batch(base, renderer):
    """Values the parsing layer would refuse, given to the batcher directly: the poisoned
    row fails, and the greedy rows decoded with it get exactly their solo results."""
    model, vocab = base
    prompts = [vocab.to_compact(question_prompt(renderer, q).to_ints()) for q in QUESTIONS]
    greedy = SamplingParams(max_new_tokens=8, temperature=0.0)
    poisoned = SamplingParams(max_new_tokens=8, temperature=5e-324)
    params = [greedy, poisoned, greedy, greedy]

    async def run():
        batcher = Batcher(torch.Generator().manual_seed(0))
        loop = asyncio.get_running_loop()
        jobs = [
            Job(prompt, p, "base", model, loop.create_future())
            for prompt, p in zip(prompts, params, strict=True)
        ]
        for job in jobs:
            batcher.submit(job)
        outcomes = await asyncio.gather(*(job.done for job in jobs), return_exceptions=True)
        await batcher.close()
        return outcomes, batcher.stats

    outcomes, stats = asyncio.run(run())
    assert isinstance(outcomes[1], RuntimeError)
    for row in (0, 2, 3):
        (alone,) = sample_batch(model, [prompts[row]], [greedy], torch.Generator())
        assert outcomes[row].tokens == alone.tokens
        assert outcomes[row].logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    assert stats["batches"] == 1 and stats["split_batches"] == 1


# ---------------------------------------------------------------------------------------
# Malformed bodies: a 4xx with a message, never a 500.

MALFORMED_BODIES = [
    (b"\xff\xfe{}", 400, "not UTF-8"),
    (b'{"model": ', 400, "not valid JSON"),
    (b"[" * 100_000, 400, "not valid JSON"),  # deeper than the parser's recursion
    (b"[1, 2]", 400, "must be a JSON object"),
    (b" " * (2 * 1024**2), 413, "larger than"),
]
WRONGLY_TYPED = [
    ({"raw_prompt_tokens": "163594"}, "raw_prompt_tokens"),
    ({"raw_prompt_tokens": [1.5]}, "raw_prompt_tokens"),
    ({"raw_prompt_tokens": [-1]}, "raw_prompt_tokens"),
    ({"raw_prompt_tokens": [2**40]}, "raw_prompt_tokens"),
    ({"raw_prompt_tokens": [True]}, "raw_prompt_tokens"),
    ({"raw_prompt_tokens": [1] * 10_000}, "raw_prompt_tokens"),
    ({"max_output_tokens": "4"}, "max_output_tokens"),
    ({"max_output_tokens": 0}, "max_output_tokens"),
    ({"stop": "<|im_end|>"}, "stop"),
    ({"stop": [[1]]}, "stop"),
    ({"metadata": ["completion_window"]}, "metadata"),
    ({"metadata": {"completion_window": 1}}, "metadata"),
    ({"include": "message.output_text.logprobs"}, "include"),
    ({"background": "yes"}, "background"),
    ({"stream": True}, "stream"),
    ({"metadata": {"completion_window": "balanced", "lora": "ftp://127.0.0.1/a.tar"}}, None),
]
BAD_ADAPTER_CONFIGS = ["{", "[1]", '{"r": NaN}']


def test_malformed_create_bodies_are_4xx(local_stack, renderer, base):
    model, vocab = base
    url = local_stack.url
    calls = [functools.partial(_raw_create, url, data) for data, _, _ in MALFORMED_BODIES]
    calls += [functools.partial(post_create, url, create_body(**f)) for f, _ in WRONGLY_TYPED]
    for config in BAD_ADAPTER_CONFIGS:
        metadata = {
            "completion_window": "balanced",
            "lora": f"{url}/tinker/archives/nobody/sampler_weights/never-fetched.tar",
            "tinker_adapter_config": config,
        }
        calls.append(functools.partial(post_create, url, create_body(metadata=metadata)))
    calls.append(functools.partial(post_create, url, create_body(model=5)))
    replies = alongside_good_requests(renderer, make_completer(), model, vocab, calls)
    for (_, status, words), reply in zip(MALFORMED_BODIES, replies, strict=False):
        _assert_refused(reply, status, words)
    replies = replies[len(MALFORMED_BODIES) :]
    for (_, param), reply in zip(WRONGLY_TYPED, replies, strict=False):
        _assert_refused(reply, 400, "", param or "metadata.lora")
    replies = replies[len(WRONGLY_TYPED) :]
    for reply in replies[:-1]:
        _assert_refused(reply, 400, "tinker_adapter_config", "metadata.tinker_adapter_config")
    _assert_refused(replies[-1], 404, f"serves {BASE_MODEL_NAME!r}", "model")


# ---------------------------------------------------------------------------------------
# The control plane: the key, JSON only, all-or-nothing changes.

CONTROL_REFUSALS = [
    ({}, b'{"latency": 0.5}', "application/json", 401),
    ({"Authorization": "Bearer sk_wrong"}, b'{"latency": 0.5}', "application/json", 401),
    (KEY_HEADER, b'{"latency": 0.5}', "text/plain", 415),  # a cross-origin simple POST
    (KEY_HEADER, b"latency=0.5", "application/x-www-form-urlencoded", 415),
    (KEY_HEADER, b'{"latency": 0.5}', "", 415),
    (KEY_HEADER, b'{"latency": 0.25, "seed": 9, "faults": {"failed": 2}}', "application/json", 400),
    (KEY_HEADER, b'{"latency": "inf"}', "application/json", 400),
    (KEY_HEADER, b'{"latency": 1e9}', "application/json", 400),
    (KEY_HEADER, b'{"latency": NaN}', "application/json", 400),
    (KEY_HEADER, b'{"seed": -1, "latency": 0.5}', "application/json", 400),
    (KEY_HEADER, b'{"seed": 1.5}', "application/json", 400),
    (KEY_HEADER, b'{"faults": "failed", "seed": 4}', "application/json", 400),
    (KEY_HEADER, b'{"faults": {"failed": 0.6, "expired": 0.6}}', "application/json", 400),
    (KEY_HEADER, b'{"faults": {"failed": true}}', "application/json", 400),
    (KEY_HEADER, b'{"bogus": 1, "latency": 0.5}', "application/json", 400),
    (KEY_HEADER, b"[1]", "application/json", 400),
    (KEY_HEADER, b"\xff\xfe", "application/json", 400),
]


def test_control_routes_need_the_key_json_and_valid_values(local_stack, renderer, base):
    model, vocab = base
    url = local_stack.url
    before = get_knobs(url)
    for route in ("/local/config", "/local/stats"):
        assert HTTP.request("GET", url + route).status == 401

    def send(headers: dict, data: bytes, content_type: str):
        headers = {**headers, **({"Content-Type": content_type} if content_type else {})}
        return HTTP.request("POST", f"{url}/local/config", body=data, headers=headers)

    calls = [functools.partial(send, *case[:3]) for case in CONTROL_REFUSALS]
    replies = alongside_good_requests(renderer, make_completer(), model, vocab, calls)
    for case, reply in zip(CONTROL_REFUSALS, replies, strict=True):
        assert reply.status == case[3], (case, reply.data)
        assert json.loads(reply.data)["error"]["message"]
    assert get_knobs(url) == before  # nothing refused was half-applied
    assert SAIL_API_KEY in json.loads(replies[0].data)["error"]["message"]
