"""What one request may make the stack do: bodies decoded off the event loop, and datums
per forward_backward capped.

A body just under the forward_backward cap, decoded on the event loop, once stopped every
other client for seconds; here smaller ones are sent while another client probes.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
import urllib3

from bench import fairness
from local_stack.tinker.requests import MAX_DATUMS

HTTP = urllib3.PoolManager(retries=False)
# How much slower than before the attack the slowest probe may answer while it runs: the
# issue's bound on a stall. Before, such bodies stalled every probe for seconds.
STALL_SECONDS = 0.5
PATIENCE_SECONDS = 60.0  # client timeouts: only a hung stack reaches them
HUGE_DATUMS = 100_000  # 6 MiB of one-token datums: seconds of decoding on the event loop
HUGE_COPIES = 2

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # tinker deprecates archive URLs


async def _quiet_probes(url: str) -> fairness.Figures:
    async with aiohttp.ClientSession() as session:
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        innocent = fairness.Client("bodyinnocent")
        return await fairness.probe_until(
            done, session, url, innocent, PATIENCE_SECONDS, PATIENCE_SECONDS
        )


def test_healthz_and_sampling_answer_while_huge_bodies_decode(local_stack) -> None:
    before = asyncio.run(_quiet_probes(local_stack.url))
    during = asyncio.run(
        fairness.attack_huge_bodies(
            local_stack.url, HUGE_DATUMS, HUGE_COPIES, PATIENCE_SECONDS, PATIENCE_SECONDS
        )
    )
    assert during.healthz_seconds <= before.healthz_seconds + STALL_SECONDS, (before, during)
    assert during.innocent_seconds <= before.innocent_seconds + STALL_SECONDS, (before, during)


def test_a_forward_backward_of_too_many_datums_is_refused_naming_the_limit(local_stack) -> None:
    client = fairness.Client("datumcap")
    model_id = fairness.training_client(local_stack.url, client).model_id
    reply = HTTP.request(
        "POST",
        f"{local_stack.url}/api/v1/forward_backward",
        body=fairness.huge_forward_backward_body(model_id, MAX_DATUMS + 1),
        headers={"X-API-Key": client.tinker_key, "Content-Type": "application/x-protobuf"},
    )
    assert reply.status == 400
    detail = json.loads(reply.data)["detail"]
    assert f"at most {MAX_DATUMS} datums" in detail and str(MAX_DATUMS + 1) in detail


def test_the_sdk_is_told_the_datum_limit_and_chunks_to_it(local_stack) -> None:
    client = fairness.Client("datumchunks")
    reply = HTTP.request(
        "POST",
        f"{local_stack.url}/api/v1/client/config",
        body=b"{}",
        headers={"X-API-Key": client.tinker_key, "Content-Type": "application/json"},
    )
    assert json.loads(reply.data)["fwdbwd_max_chunk_len"] == MAX_DATUMS
    trainer = fairness.training_client(local_stack.url, client)
    data = fairness.datums(MAX_DATUMS + 3, tokens=2)
    result = trainer.forward_backward(data, "importance_sampling").result()
    assert len(result.loss_fn_outputs) == MAX_DATUMS + 3
