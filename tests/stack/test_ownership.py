"""What one client creates is its own: runs, sessions, futures, checkpoints, files, LoRAs,
responses.

Each client here has keys of its own (`tml-local-<client>`, `sk_local_<client>`), as every
kernel does. The other client gets 404 for whatever it may not touch, the same answer as for
an id never issued. Reading a checkpoint by its `tinker://` path is shared on purpose
(`local_stack.tinker.state` says why), and so is deleting the one state checkpoint a run
resumed from. After each attack a bystander client is still served (`isolation_support`).
"""

from __future__ import annotations

import asyncio
import hashlib
import stat
from pathlib import Path

import pytest
from tinker import types

from local_stack.client.tiny_model import sail_lora_metadata
from local_stack.engine.model import ADAPTER_CONFIG_PATH
from local_stack.sail.files import MAX_FILE_BYTES, MAX_STORED_FILES
from local_stack.sail.loras import MAX_CLIENT_LORAS
from tests.isolation_support import (
    assert_bystander_served,
    new_client,
    sail,
    sample_from_lora,
    tinker_json,
    tinker_service,
)
from tests.sail_support import HTTP, create_body
from tests.tinker_datums import MODEL, rl_datum

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # tinker deprecates archive URLs


async def _trained_run(url: str, client: str, name: str) -> tuple[str, str, str]:
    """A run of `client` trained one step: its model id, its state and sampler paths."""
    training = await tinker_service(url, client).create_lora_training_client_async(
        base_model=MODEL, rank=8, seed=1
    )
    fwdbwd = await training.forward_backward_async([rl_datum()], "importance_sampling")
    optim = await training.optim_step_async(types.AdamParams(learning_rate=1e-2))
    await fwdbwd
    await optim
    state = await (await training.save_state_async(f"{name}-state"))
    sampler = await (await training.save_weights_for_sampler_async(f"{name}-sampler"))
    return training.model_id, state.path, sampler.path


def _checkpoint_files(storage: Path, tinker_path: str) -> Path:
    return storage / "tinker" / tinker_path.removeprefix("tinker://")


def _digest(directory: Path) -> str:
    return hashlib.sha256((directory / "adapter_model.safetensors").read_bytes()).hexdigest()


def _rest(url: str, client: str, method: str, tinker_path: str, suffix: str = "", **kwargs):
    """A RestClient-style call on a checkpoint, with `client`'s key."""
    model_id, kind, name = tinker_path.removeprefix("tinker://").split("/")
    route = f"{url}/api/v1/training_runs/{model_id}/checkpoints/{kind}/{name}{suffix}"
    headers = {"X-API-Key": f"tml-local-{client}"}
    return HTTP.request(method, route, headers=headers, **kwargs)


def test_another_client_cannot_step_save_into_or_read_a_run(local_stack):
    url, alice, mallory = local_stack.url, new_client("alice"), new_client("mallory")
    model_id, state_path, sampler_path = asyncio.run(_trained_run(url, alice, "owned"))
    session_id = model_id.split(":")[0]
    state_dir = _checkpoint_files(local_stack.storage_dir, state_path)
    before = _digest(state_dir)

    # A future of Alice's: a model she creates over raw HTTP in a session of her own.
    alice_session = tinker_json(
        url, alice, "/create_session", {"tags": [], "user_metadata": None, "sdk_version": "x"}
    ).json()["session_id"]
    new_model = {
        "session_id": alice_session,
        "model_seq_id": 0,
        "base_model": MODEL,
        "lora_config": {"rank": 8},
    }
    created = tinker_json(url, alice, "/create_model", new_model).json()

    refused = {
        "/optim_step": {"model_id": model_id, "seq_id": 1, "adam_params": {"learning_rate": 1}},
        "/save_weights": {"model_id": model_id, "seq_id": 2, "path": "owned-state"},
        "/save_weights_for_sampler": {"model_id": model_id, "seq_id": 3, "path": "x"},
        "/load_weights": {"model_id": model_id, "seq_id": 4, "path": state_path},
        "/get_info": {"model_id": model_id},
        "/create_model": {**new_model, "session_id": session_id, "model_seq_id": 7},
        "/session_heartbeat": {"session_id": session_id},
        "/retrieve_future": {"request_id": created["request_id"]},
    }
    for route, body in refused.items():
        reply = tinker_json(url, mallory, route, body)
        assert reply.status == 404, (route, reply.data[:300])
        assert "unknown" in reply.json()["detail"], (route, reply.json())
    finish = HTTP.request(
        "POST",
        f"{url}/api/v1/sessions/{session_id}/finish",
        headers={"X-API-Key": f"tml-local-{mallory}"},
    )
    assert finish.status == 404
    for path in (state_path, sampler_path):  # only the owner deletes or re-times a checkpoint
        assert _rest(url, mallory, "DELETE", path).status == 404
        ttl = _rest(url, mallory, "PUT", path, "/ttl", json={"ttl_seconds": 3600})
        assert ttl.status == 404 and "not found" in ttl.json()["detail"]
    assert_bystander_served(url)

    # Nothing of Alice's changed, and all of it still answers her.
    assert _digest(state_dir) == before
    assert (
        tinker_json(url, alice, "/retrieve_future", {"request_id": created["request_id"]}).status
        == 200
    )
    assert tinker_json(url, alice, "/get_info", {"model_id": model_id}).status == 200
    assert tinker_json(url, alice, "/session_heartbeat", {"session_id": session_id}).status == 200
    assert _rest(url, alice, "PUT", state_path, "/ttl", json={"ttl_seconds": 3600}).status == 200
    assert _rest(url, alice, "DELETE", sampler_path).status == 200


def test_checkpoints_are_shared_for_reading_and_a_resumed_run_may_retire_its_state(
    local_stack,
):
    """Notebook 04 after a crash: a new kernel (a new client) resumes from the dead kernel's
    state, then deletes it once its own next state is saved. Notebook 09: another kernel
    loads 04's state and serves its adapter."""
    url, alice, bob = local_stack.url, new_client("alice"), new_client("bob")
    _, state_path, sampler_path = asyncio.run(_trained_run(url, alice, "shared"))
    weights_info = tinker_json(url, bob, "/weights_info", {"tinker_path": state_path})
    assert weights_info.status == 200 and weights_info.json()["lora_rank"] == 8
    archive = _rest(url, bob, "GET", sampler_path, "/archive")
    assert archive.status == 200
    lora = sail_lora_metadata(archive.json()["url"], rank=8)
    sampled = sample_from_lora(url, bob, lora, background=False)
    assert sampled.status == 200 and sampled.json()["output"], sampled.data[:300]
    assert _rest(url, bob, "DELETE", state_path).status == 404

    async def load(with_optimizer: bool) -> str:
        training = await tinker_service(url, bob).create_lora_training_client_async(
            base_model=MODEL, rank=8
        )
        if with_optimizer:
            await (await training.load_state_with_optimizer_async(state_path))
        else:
            await (await training.load_state_async(state_path))
        return training.model_id

    asyncio.run(load(with_optimizer=False))  # notebook 09: reads the weights, no more
    assert _rest(url, bob, "DELETE", state_path).status == 404
    asyncio.run(load(with_optimizer=True))  # notebook 04 resumed: it continues Alice's run
    assert _rest(url, bob, "DELETE", sampler_path).status == 404  # not what it resumed from
    assert _rest(url, bob, "DELETE", state_path).status == 200
    assert _rest(url, alice, "DELETE", state_path).status == 404  # gone for everyone
    assert_bystander_served(url)


def test_the_storage_folder_is_private(local_stack):
    url, alice = local_stack.url, new_client("alice")
    model_id, _, _ = asyncio.run(_trained_run(url, alice, "private"))
    storage = local_stack.storage_dir
    assert stat.S_IMODE(storage.stat().st_mode) == 0o700
    assert stat.S_IMODE((storage / "tinker").stat().st_mode) == 0o700
    run_dir = storage / "tinker" / model_id
    written = [run_dir, *run_dir.rglob("*")]
    assert len(written) > 5
    for path in written:
        expected = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(path.stat().st_mode) == expected, path


def test_sail_files_and_loras_belong_to_their_client(local_stack):
    url, alice, bob = local_stack.url, new_client("alice"), new_client("bob")
    config = ADAPTER_CONFIG_PATH.read_bytes()

    def upload(client: str, name: str, data: bytes) -> str:
        fields = {"purpose": "lora", "file": (name, data)}
        reply = sail(url, client, "POST", "/files", fields=fields)
        assert reply.status == 200, reply.data
        return reply.json()["id"]

    def create_lora(client: str, config_id: str, weights_id: str):
        body = {
            "name": "same-name",
            "supported_models": [MODEL],
            "config_file_id": config_id,
            "weights_file_id": weights_id,
        }
        return sail(url, client, "POST", "/loras", json=body)

    alice_files = [upload(alice, "adapter_config.json", config), upload(alice, "w", b"w")]
    assert create_lora(alice, *alice_files).status == 200

    listed = sail(url, bob, "GET", "/files").json()["data"]
    assert not {f["id"] for f in listed} & set(alice_files)
    assert sail(url, bob, "GET", "/loras").json()["data"] == []
    for file_id in alice_files:
        assert sail(url, bob, "GET", f"/files/{file_id}").status == 404
        assert sail(url, bob, "DELETE", f"/files/{file_id}").status == 404
    alice_lora = sail(url, alice, "GET", "/loras/same-name").json()
    for ref in ("same-name", alice_lora["id"]):
        assert sail(url, bob, "GET", f"/loras/{ref}").status == 404
        assert sail(url, bob, "DELETE", f"/loras/{ref}").status == 404
    stolen = create_lora(bob, *alice_files)  # a LoRA from another client's files
    assert stolen.status == 404 and stolen.json()["error"]["code"] == "file_not_found"
    metadata = {"completion_window": "balanced", "lora": "same-name"}
    sampled = sail(url, bob, "POST", "/responses", json=create_body(metadata=metadata))
    assert sampled.status == 404 and sampled.json()["error"]["code"] == "lora_not_found"
    # Names are per client, as Sail's are per organisation: Bob has his own "same-name".
    bob_files = [upload(bob, "adapter_config.json", config), upload(bob, "w", b"w")]
    assert create_lora(bob, *bob_files).status == 200
    assert_bystander_served(url)

    assert sail(url, alice, "GET", "/loras/same-name").json()["id"] == alice_lora["id"]
    for client, file_ids in ((alice, alice_files), (bob, bob_files)):
        assert [lora["name"] for lora in sail(url, client, "GET", "/loras").json()["data"]] == [
            "same-name"
        ]
        assert sail(url, client, "DELETE", "/loras/same-name").status == 200
        for file_id in file_ids:
            assert sail(url, client, "DELETE", f"/files/{file_id}").status == 200


def test_a_response_answers_only_the_client_that_asked_for_it(local_stack):
    url, alice, bob = local_stack.url, new_client("alice"), new_client("bob")
    created = sail(url, alice, "POST", "/responses", json=create_body()).json()
    assert sail(url, bob, "GET", f"/responses/{created['id']}").status == 404
    assert_bystander_served(url)
    retrieved = sail(url, alice, "GET", f"/responses/{created['id']}")
    assert retrieved.status == 200 and retrieved.json()["id"] == created["id"]


def test_one_client_filling_its_share_leaves_room_for_the_others(local_stack):
    """Sail's file storage and LoRA slots are bounded; one client may take only its share."""
    url, mallory, alice = local_stack.url, new_client("mallory"), new_client("alice")

    def upload(client: str, data: bytes):
        return sail(url, client, "POST", "/files", fields={"purpose": "lora", "file": ("f", data)})

    big = b"\1" * MAX_FILE_BYTES
    kept = []
    while (reply := upload(mallory, big)).status == 200:
        kept.append(reply.json()["id"])
        assert len(kept) <= MAX_STORED_FILES, "the client's share never filled up"
    assert reply.status == 413 and "your" in reply.json()["error"]["message"]
    config_id = upload(alice, ADAPTER_CONFIG_PATH.read_bytes()).json()["id"]
    weights_id = upload(alice, b"w").json()["id"]

    def create(client: str, name: str, file_ids: list[str]):
        body = {
            "name": name,
            "supported_models": [MODEL],
            "config_file_id": file_ids[0],
            "weights_file_id": file_ids[1],
        }
        return sail(url, client, "POST", "/loras", json=body)

    # Mallory's LoRAs need files of her own: she frees room for two small ones first.
    assert sail(url, mallory, "DELETE", f"/files/{kept.pop()}").status == 200
    mallory_ids = [upload(mallory, b"{}").json()["id"], upload(mallory, b"w").json()["id"]]
    names = [f"share-{i}" for i in range(MAX_CLIENT_LORAS)]
    for name in names:
        assert create(mallory, name, mallory_ids).status == 200
    refused = create(mallory, "one-too-many", mallory_ids)
    assert refused.status == 413 and refused.json()["error"]["code"] == "too_many_loras"
    assert create(alice, "alice-still-fits", [config_id, weights_id]).status == 200
    assert_bystander_served(url)

    for client, lora_names in ((mallory, names), (alice, ["alice-still-fits"])):
        for name in lora_names:
            assert sail(url, client, "DELETE", f"/loras/{name}").status == 200
    for client, file_ids in ((mallory, kept + mallory_ids), (alice, [config_id, weights_id])):
        for file_id in file_ids:
            assert sail(url, client, "DELETE", f"/files/{file_id}").status == 200
