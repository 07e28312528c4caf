"""Hostile and careless input to the local Tinker service, through raw HTTP and the real tinker
SDK, against the session's local stack.

Each test asserts the refusal (a 4xx JSON `detail`, or the SDK's exception, naming what is
wrong) and that nothing else was affected: a reference model's forward pass on a fixed datum,
run concurrently with the hostile requests, gives exactly the logprobs it gave before them,
and the model the hostile requests were aimed at still has its weights and still trains.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import aiohttp
import numpy as np
import pytest
import tinker
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker.types.forward_backward_input import ForwardBackwardInput
from tinker.types.forward_backward_request import ForwardBackwardRequest

from local_stack.client.supervisor import LocalStack
from local_stack.config import TINKER_API_KEY
from tests.tinker_datums import MODEL, rl_datum

FIXED = rl_datum(seed=42)
T = TypeVar("T")
GOOD_ADAM = {"learning_rate": 1e-2}


@dataclass
class Stack:
    """A reference model, a model to aim hostile requests at, and raw HTTP to the API."""

    url: str
    http: aiohttp.ClientSession
    reference: tinker.TrainingClient
    target: tinker.TrainingClient

    async def raw(
        self, path: str, body: bytes, method: str = "POST", content_type: str = "application/json"
    ) -> tuple[int, dict]:
        headers = {"X-API-Key": TINKER_API_KEY, "Content-Type": content_type}
        url = f"{self.url}/api/v1{path}"
        async with self.http.request(method, url, data=body, headers=headers) as reply:
            return reply.status, await reply.json(content_type=None)

    async def unaffected_while(self, hostile: Awaitable[T]) -> T:
        """Await `hostile` while the reference model computes its fixed forward pass."""
        before = await logprobs(self.reference)
        during, outcome = await asyncio.gather(logprobs(self.reference), hostile)
        np.testing.assert_array_equal(during, before)
        np.testing.assert_array_equal(await logprobs(self.reference), before)
        return outcome


async def logprobs(client: tinker.TrainingClient) -> np.ndarray:
    result = await (await client.forward_async([FIXED], "importance_sampling"))
    return result.loss_fn_outputs[0]["logprobs"].to_numpy()


def on_stack(local_stack: LocalStack, scenario: Callable[[Stack], Awaitable[None]]) -> None:
    async def main() -> None:
        service = tinker.ServiceClient(base_url=local_stack.url, api_key=TINKER_API_KEY)
        reference, target = [
            await service.create_lora_training_client_async(base_model=MODEL, rank=8, seed=seed)
            for seed in (0, 1)
        ]
        async with aiohttp.ClientSession() as http:
            await scenario(Stack(local_stack.url, http, reference, target))

    asyncio.run(main())


# -- malformed requests: each a 4xx with a message, never a 500 ---------------------------


def fwdbwd_proto(model_id: str, seq_id: int, datum: types.Datum = FIXED):
    request = ForwardBackwardRequest(
        forward_backward_input=ForwardBackwardInput(data=[datum], loss_fn="importance_sampling"),
        model_id=model_id,
        seq_id=seq_id,
    )
    return forward_backward_request_to_proto(request)


def optim_body(model_id: str, seq_id: object, **adam: object) -> bytes:
    message = {"model_id": model_id, "seq_id": seq_id, "adam_params": GOOD_ADAM | adam}
    return json.dumps(message).encode()


def malformed_requests(model_id: str, seq_ids: itertools.count) -> list[tuple[str, bytes, str]]:
    """(path, body, what the refusal must say); `seq_ids` numbers the ones that claim one."""

    def optim(seq_id: object, **adam: object) -> bytes:
        return optim_body(model_id, seq_id, **adam)

    def create(model_seq_id: object) -> bytes:
        lora = {"rank": 8}
        message = {"session_id": "s", "model_seq_id": model_seq_id, "base_model": MODEL}
        return json.dumps(message | {"lora_config": lora}).encode()

    # Unreadable, so it claims no seq_id (taking one from `seq_ids` would leave a gap).
    truncated = fwdbwd_proto(model_id, 10**5).SerializeToString()[:-7]
    odd_bytes = fwdbwd_proto(model_id, next(seq_ids))
    odd_bytes.data[0].loss_fn_inputs["target_tokens"].dense = b"\0" * 7
    save = {"model_id": model_id, "seq_id": next(seq_ids), "path": "x", "overwrite": "maybe"}
    return [
        ("/optim_step", b"\xff\xfe{not utf-8", "not UTF-8"),
        ("/create_session", b"[1, 2]", "must be a JSON object"),
        ("/optim_step", b"[" * 100_000, "nested too deeply"),
        ("/create_model", create("seven"), "model_seq_id"),
        ("/create_model", create(-1), "model_seq_id must be an integer from 0 to 2147483647"),
        ("/create_model", create(2**40), "model_seq_id must be an integer from 0 to 2147483647"),
        ("/optim_step", optim(-5), "seq_id must be an integer from 1 to 2147483647"),
        ("/optim_step", optim(2**31), "seq_id must be an integer from 1 to 2147483647"),
        ("/optim_step", optim("abc"), "seq_id must be an integer"),
        ("/optim_step", optim(10**6), "too far ahead"),
        ("/optim_step", optim(next(seq_ids), learning_rate="fast"), "learning_rate"),
        ("/optim_step", optim(next(seq_ids), learning_rate=None), "learning_rate must be"),
        ("/optim_step", optim(next(seq_ids), beta2=float("inf")), "beta2 must be"),
        ("/optim_step", optim(next(seq_ids), weight_decay=1e9), "weight_decay must be"),
        ("/save_weights", json.dumps(save).encode(), "overwrite"),
        ("/weights_info", b"{}", "tinker_path"),
        ("/retrieve_future", b'{"request_id": 12}', "request_id"),
        ("/forward_backward", truncated, "not a ForwardBackwardRequest"),
        ("/forward_backward", odd_bytes.SerializeToString(), "not a whole number"),
        ("/forward_backward", fwdbwd_proto(model_id, 0).SerializeToString(), "seq_id must be"),
        ("/get_info", json.dumps({"model_id": "m" * 10_000}).encode(), "model_id"),
    ]


def test_malformed_requests_answer_4xx_and_leave_the_stack_working(local_stack):
    async def scenario(stack: Stack) -> None:
        model_id = stack.target.model_id  # driven raw from here on, so raw numbers its seq_ids
        seq_ids = itertools.count(1)
        cases = malformed_requests(model_id, seq_ids)

        async def send(path: str, body: bytes) -> tuple[int, dict]:
            proto = path == "/forward_backward"
            content_type = "application/x-protobuf" if proto else "application/json"
            return await stack.raw(path, body, content_type=content_type)

        hostile = asyncio.gather(*(send(path, body) for path, body, _ in cases))
        answers = await stack.unaffected_while(hostile)
        for (path, _, expected), (status, answer) in zip(cases, answers, strict=True):
            assert status == 400, (path, expected, answer)
            assert expected in answer["detail"], (path, answer)
        status, future = await stack.raw("/optim_step", optim_body(model_id, next(seq_ids)))
        assert status == 200, future  # the refused requests used up their seq_ids: no stall
        body = json.dumps({"request_id": future["request_id"]}).encode()
        status, result = await stack.raw("/retrieve_future", body)
        assert status == 200 and np.isfinite(result["metrics"]["optim/grad_norm"]), result

    on_stack(local_stack, scenario)


def test_a_wrong_key_is_401_and_an_unknown_id_a_short_404(local_stack):
    async def scenario(stack: Stack) -> None:
        url = f"{stack.url}/api/v1/get_info"
        async with stack.http.post(url, json={"model_id": "x"}) as reply:
            assert reply.status == 401
        status, answer = await stack.raw("/get_info", json.dumps({"model_id": "g" * 100}).encode())
        assert status == 404 and len(answer["detail"]) < 200, answer

    on_stack(local_stack, scenario)


# -- numbers that would poison training ----------------------------------------------------

BAD_ADAM = [
    ("learning_rate", types.AdamParams(learning_rate=1e6)),
    ("learning_rate", types.AdamParams(learning_rate=float("inf"))),  # the SDK sends null
    ("learning_rate", types.AdamParams(learning_rate=float("nan"))),
    ("learning_rate", types.AdamParams(learning_rate=-1e-3)),
    ("beta1", types.AdamParams(beta1=1.0)),
    ("beta2", types.AdamParams(beta2=1.5)),
    ("eps", types.AdamParams(eps=0.0)),
    ("weight_decay", types.AdamParams(weight_decay=1e9)),
    ("grad_clip_norm", types.AdamParams(grad_clip_norm=-1.0)),
]


def test_optimizer_settings_outside_their_ranges_are_refused_and_change_nothing(local_stack):
    async def scenario(stack: Stack) -> None:
        target = stack.target
        before = await logprobs(target)
        data = [rl_datum(seed=s) for s in range(4)]
        await (await target.forward_backward_async(data, "importance_sampling"))

        async def hostile() -> None:
            for name, hp in BAD_ADAM:
                with pytest.raises(tinker.BadRequestError, match=rf"adam_params\.{name} must be"):
                    await (await target.optim_step_async(hp))

        await stack.unaffected_while(hostile())
        np.testing.assert_array_equal(await logprobs(target), before)
        step = await (await target.optim_step_async(types.AdamParams(learning_rate=1e-2)))
        assert step.metrics["optim/grad_norm"] > 0  # the gradient accumulated before is intact
        after = await logprobs(target)
        assert np.isfinite(after).all() and not np.array_equal(after, before)

    on_stack(local_stack, scenario)


def with_sampler_logprobs(datum: types.Datum, value: float) -> types.Datum:
    inputs = dict(datum.loss_fn_inputs)
    length = len(inputs["logprobs"].tolist())
    inputs["logprobs"] = types.TensorData.from_numpy(np.full(length, value, np.float32))
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


def test_sampler_logprobs_that_poison_the_loss_are_refused_and_accumulate_nothing(local_stack):
    async def scenario(stack: Stack) -> None:
        target = stack.target
        before = await logprobs(target)

        async def hostile() -> None:
            nan = with_sampler_logprobs(rl_datum(), float("nan"))
            with pytest.raises(tinker.BadRequestError, match="non-finite"):
                await (await target.forward_backward_async([nan], "importance_sampling"))
            # Finite, but exp(logprobs - sampler logprobs) overflows: refused while computing.
            overflow = with_sampler_logprobs(rl_datum(), -1e4)
            future = await target.forward_backward_async([overflow], "importance_sampling")
            with pytest.raises(tinker.RequestFailedError, match="loss of this batch is"):
                await future

        await stack.unaffected_while(hostile())
        # Nothing was accumulated, so Adam's first step moves nothing.
        step = await (await target.optim_step_async(types.AdamParams(learning_rate=1e-2)))
        assert step.metrics["optim/grad_norm"] == 0
        np.testing.assert_array_equal(await logprobs(target), before)

    on_stack(local_stack, scenario)


# -- races ---------------------------------------------------------------------------------


def test_concurrent_save_state_with_one_name_saves_exactly_once(local_stack):
    async def scenario(stack: Stack) -> None:
        async def save() -> types.SaveWeightsResponse:
            return await (await stack.target.save_state_async("taken-once"))

        saves = asyncio.gather(*(save() for _ in range(4)), return_exceptions=True)
        outcomes = await stack.unaffected_while(saves)
        saved = [o for o in outcomes if isinstance(o, types.SaveWeightsResponse)]
        refused = [o for o in outcomes if isinstance(o, tinker.TinkerError)]
        assert len(saved) == 1 and len(refused) == 3, outcomes
        assert all("already exists" in str(e) for e in refused), refused
        assert saved[0].path.endswith("/weights/taken-once")

    on_stack(local_stack, scenario)


def test_concurrent_create_model_with_one_model_seq_id_creates_exactly_once(local_stack):
    async def scenario(stack: Stack) -> None:
        session = {"tags": [], "user_metadata": None, "sdk_version": "raw"}
        _, created = await stack.raw("/create_session", json.dumps(session).encode())
        create = {"session_id": created["session_id"], "model_seq_id": 0, "base_model": MODEL}
        body = json.dumps(create | {"lora_config": {"rank": 8}}).encode()
        creates = asyncio.gather(*(stack.raw("/create_model", body) for _ in range(4)))
        answers = await stack.unaffected_while(creates)
        statuses = sorted(status for status, _ in answers)
        assert statuses == [200, 400, 400, 400], answers
        assert all("already used" in a["detail"] for s, a in answers if s == 400), answers

    on_stack(local_stack, scenario)


# -- a retried request: the SDK re-sends a timed-out request with the same seq_id ----------


def test_a_retried_request_gets_the_same_future_and_runs_once(local_stack):
    async def scenario(stack: Stack) -> None:
        model_id = stack.target.model_id  # driven raw from here on
        first = optim_body(model_id, 1, learning_rate=0.0)
        status, sent = await stack.raw("/optim_step", first)
        assert status == 200, sent
        status, retried = await stack.raw("/optim_step", first)
        assert status == 200 and retried["request_id"] == sent["request_id"], retried
        status, other = await stack.raw("/optim_step", optim_body(model_id, 1, beta1=0.5))
        assert status == 400 and "seq_id 1 was already used" in other["detail"], other
        body = json.dumps({"request_id": sent["request_id"]}).encode()
        status, result = await stack.raw("/retrieve_future", body)
        assert status == 200 and "metrics" in result, result
        status, after = await stack.raw("/optim_step", optim_body(model_id, 2))
        assert status == 200 and after["request_id"] != sent["request_id"], after

    on_stack(local_stack, scenario)
