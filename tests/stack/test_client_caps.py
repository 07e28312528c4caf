"""What one client can make the stack hold is capped, each refusal one sentence naming the
limit: response metadata, stored responses, training clients, checkpoints and their disk.

The caps are reproduced at reduced size by lowering them in a service built in this process;
metadata is checked over HTTP, where the course's own requests must keep passing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from local_stack.client.tiny_model import sail_lora_metadata
from local_stack.control.knobs import ClientKnobs, Knobs
from local_stack.engine.checkpoints import CheckpointStore, RunInfo
from local_stack.http import ApiError
from local_stack.lanes import Lanes
from local_stack.sail import requests as sail_requests
from local_stack.sail import service as sail_service
from local_stack.sail.requests import (
    MAX_METADATA_CHARS,
    MAX_METADATA_KEY_CHARS,
    MAX_METADATA_KEYS,
    MAX_METADATA_VALUE_CHARS,
    parse_sampling_request,
)
from local_stack.tinker import service as tinker_service
from local_stack.tinker.requests import NewModel, Save
from local_stack.tinker.service import TinkerService
from tests.sail_support import create_body, error_of, post_create
from tests.tinker_datums import MODEL

# A signed URL as long as a cloud storage one (its signature alone is 512 hex characters).
SIGNED_URL = "https://storage.example/tinker/run/sampler_weights/step.tar?" + "s=" + "ab" * 700


@pytest.mark.parametrize(
    ("metadata", "limit"),
    [
        ({f"k{i}": "v" for i in range(MAX_METADATA_KEYS + 1)}, f"at most {MAX_METADATA_KEYS}"),
        ({"k" * (MAX_METADATA_KEY_CHARS + 1): "v"}, f"at most {MAX_METADATA_KEY_CHARS}"),
        ({"k": "v" * (MAX_METADATA_VALUE_CHARS + 1)}, f"at most {MAX_METADATA_VALUE_CHARS}"),
        ({f"k{i}": "v" * 2000 for i in range(9)}, f"at most {MAX_METADATA_CHARS}"),
    ],
)
def test_oversized_metadata_is_refused_naming_the_limit(local_stack, metadata, limit) -> None:
    reply = post_create(local_stack.url, create_body(metadata=metadata))
    assert reply.status == 400
    assert limit in error_of(reply)


def test_what_the_sail_sdk_sends_as_metadata_passes() -> None:
    """completion_window, a long signed URL, the adapter config, a LoRA name, and a few keys
    of the caller's own: far under every metadata cap."""
    metadata = {
        "completion_window": "flex",
        **sail_lora_metadata(SIGNED_URL, rank=128),
        "tinker_lora_name": "run-20261203-step-0042",
        **{f"user_key_{i}": "some value" for i in range(8)},
    }
    assert sail_requests._metadata(metadata) == metadata
    assert sum(map(len, metadata.values())) < MAX_METADATA_CHARS / 4


@pytest.fixture
def small_caps(monkeypatch) -> None:
    monkeypatch.setattr(sail_service, "MAX_RESPONSES_PER_CLIENT", 3)
    monkeypatch.setattr(tinker_service, "MAX_TRAINING_RUNS", 2)
    monkeypatch.setattr(tinker_service, "MAX_CHECKPOINTS", 2)


def _sail(registered: set[str]) -> sail_service.SailService:
    return sail_service.SailService(ClientKnobs(Knobs()), Lanes(lambda: registered))


async def _create(service: sail_service.SailService, client: str):
    body = create_body(max_output_tokens=2)
    request = parse_sampling_request(body, service.vocabs, client=client, archive_prefix=None)
    return await service.create(request, client)


def test_a_client_holds_at_most_its_cap_of_stored_responses(small_caps) -> None:
    async def main() -> None:
        service = _sail({"flooder", "bystander"})
        service.knobs.update("flooder", {"latency": 600})  # its responses stay in progress
        bystanders = [await _create(service, "bystander") for _ in range(2)]
        held = [await _create(service, "flooder") for _ in range(3)]
        with pytest.raises(ApiError) as refused:
            await _create(service, "flooder")
        assert refused.value.status == 429
        assert "3 of your responses are still in progress" in str(refused.value)
        # Once finished, the flooder's oldest response makes room for its next one.
        service.knobs.reset("flooder")
        held[0].ready_at = 0.0
        await asyncio.wait_for(held[0].job.done, 60)
        newest = await _create(service, "flooder")
        assert service.find(held[0].id) is None and service.find(newest.id) is newest
        assert all(service.find(b.id) is b for b in bystanders)  # nobody else's pushed out
        await service.close()

    asyncio.run(main())


def _tinker(tmp_path: Path, registered: set[str]) -> TinkerService:
    return TinkerService(CheckpointStore(tmp_path), ClientKnobs(Knobs()), Lanes(lambda: registered))


async def _new_run(service: TinkerService, client: str, rank: int = 4) -> str:
    session = service.create_session(client)
    request_id, model_id = service.create_model(
        NewModel(session, 0, RunInfo(MODEL, lora_rank=rank), seed=0), client
    )
    assert "error" not in await service.result(request_id, 120, client)
    return model_id


def test_training_clients_are_capped_per_client_and_made_up_keys_share_one_cap(
    tmp_path, small_caps
) -> None:
    async def main() -> None:
        service = _tinker(tmp_path, {"kernel"})
        for _ in range(2):
            await _new_run(service, "kernel")
        with pytest.raises(ValueError, match="this client has 2 training clients of LoRA rank"):
            await _new_run(service, "kernel")
        await _new_run(service, "madeupa")
        await _new_run(service, "madeupb")
        with pytest.raises(ValueError, match="they share one quota"):
            await _new_run(service, "madeupc")
        service.close()

    asyncio.run(main())


def test_training_clients_are_capped_by_their_lora_ranks_in_all(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(tinker_service, "MAX_TRAINING_RANKS", 10)

    async def main() -> None:
        service = _tinker(tmp_path, {"kernel"})
        await _new_run(service, "kernel", rank=4)
        await _new_run(service, "kernel", rank=4)
        with pytest.raises(ValueError, match="rank 8 in all, and one client may hold 256 of rank"):
            await _new_run(service, "kernel", rank=4)
        await _new_run(service, "kernel", rank=2)  # what still fits
        service.close()

    asyncio.run(main())


async def _save(service: TinkerService, client: str, model_id: str, name: str) -> dict:
    request_id = service.submit(
        model_id,
        None,
        name,
        lambda model: service.save(model, Save("weights", name, None, overwrite=False)),
        client,
    )
    return await service.result(request_id, 120, client)


def test_checkpoints_are_capped_per_client_by_count_and_by_disk(
    tmp_path, small_caps, monkeypatch
) -> None:
    async def main() -> None:
        service = _tinker(tmp_path, {"kernel"})
        model_id = await _new_run(service, "kernel")
        assert "error" not in await _save(service, "kernel", model_id, "first")
        _, one_checkpoint = service.store.usage([model_id])
        monkeypatch.setattr(tinker_service, "MAX_CHECKPOINT_BYTES", one_checkpoint * 3 // 2)
        failed = await _save(service, "kernel", model_id, "second")
        assert failed["category"] == "user" and "MiB one client may hold" in failed["error"]
        assert service.store.usage([model_id]) == (1, one_checkpoint)  # nothing half-written
        monkeypatch.setattr(tinker_service, "MAX_CHECKPOINT_BYTES", one_checkpoint * 10)
        assert "error" not in await _save(service, "kernel", model_id, "second")
        with pytest.raises(ValueError, match="2 checkpoints saved or queued, the most one"):
            await _save(service, "kernel", model_id, "third")
        service.close()

    asyncio.run(main())
