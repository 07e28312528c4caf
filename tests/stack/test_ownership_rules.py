"""The stack's ownership rules, in-process (no server): another client's session, model,
future, checkpoint, file or LoRA is as unknown as one never made, in the same words; only a
checkpoint's owner, or a client whose live run resumed from it, may change it.
(`test_ownership.py` checks the same through the SDKs on a running stack.)"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from local_stack.control.knobs import ClientKnobs, Knobs
from local_stack.engine.checkpoints import (
    CheckpointNotFound,
    CheckpointRef,
    CheckpointStore,
    RunInfo,
)
from local_stack.http import ApiError
from local_stack.lanes import Lanes
from local_stack.sail.files import FileStore
from local_stack.sail.loras import LoraRegistry, LoraSpec
from local_stack.tinker.service import TinkerService
from local_stack.tinker.state import SessionFinished, TrainingModel, UnknownId

MODEL = "tiny-model"


def service(tmp_path: Path) -> TinkerService:
    return TinkerService(CheckpointStore(tmp_path / "checkpoints"), ClientKnobs(Knobs()), Lanes())


def test_a_session_is_its_creators_alone(tmp_path):
    tinker = service(tmp_path)
    mine = tinker.create_session("alice")
    tinker.heartbeat(mine, "alice")
    for act in (tinker.heartbeat, tinker.finish_session):
        with pytest.raises(UnknownId, match=f"unknown session '{mine}'"):
            act(mine, "bob")
        with pytest.raises(UnknownId, match="unknown session 'local-never'"):
            act("local-never", "alice")
    tinker.heartbeat(mine, "alice")  # bob's tries changed nothing
    tinker.finish_session(mine, "alice")
    with pytest.raises(SessionFinished, match=f"session '{mine}' has finished"):
        tinker.heartbeat(mine, "alice")


def add_model(tinker: TinkerService, model_id: str, owner: str) -> TrainingModel:
    info = RunInfo(base_model=MODEL, lora_rank=4)
    tinker.store.save_run_info(model_id, info, owner)
    model = TrainingModel(model_id, owner, info, trainer=None)
    tinker.models[model_id] = model
    return model


def test_a_model_is_its_creators_alone(tmp_path):
    tinker = service(tmp_path)
    model = add_model(tinker, "s:train:0", "alice")
    assert tinker.model("s:train:0", "alice") is model
    for model_id, client in (("s:train:0", "bob"), ("s:train:9", "alice"), (None, "alice")):
        with pytest.raises(UnknownId, match=f"unknown model_id {model_id!r}: create a training"):
            tinker.model(model_id, client)


def test_a_future_is_its_requesters_alone(tmp_path):
    tinker = service(tmp_path)

    async def main():
        request_id, future = tinker.futures.new("alice")
        assert await tinker.result(request_id, 0.01, "alice") is None  # not done yet
        for rid, client in ((request_id, "bob"), ("never-issued", "alice")):
            with pytest.raises(UnknownId, match=f"unknown request_id '{rid}'"):
                await tinker.result(rid, 0.01, client)
        await future.complete_with(lambda: {"answer": 42}, "alice")
        assert await tinker.result(request_id, 0.01, "alice") == {"answer": 42}
        with pytest.raises(UnknownId):
            await tinker.result(request_id, 0.01, "bob")

    asyncio.run(main())


def saved_checkpoint(tinker: TinkerService, model_id: str, owner: str) -> CheckpointRef:
    add_model(tinker, model_id, owner)
    ref = CheckpointRef(model_id, "weights", "step-1")
    with tinker.store.staging_dir() as staging:
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            (staging / name).write_bytes(b"{}")
        tinker.store.publish(ref, staging, None, overwrite=False)
    return ref


def test_only_the_owner_or_a_run_resumed_from_it_may_change_a_checkpoint(tmp_path):
    tinker = service(tmp_path)
    ref = saved_checkpoint(tinker, "a:train:0", "alice")
    not_found = f"checkpoint {ref.tinker_path} not found"
    for act in (lambda c: tinker.set_ttl(ref, 60, c), lambda c: tinker.delete(ref, c)):
        with pytest.raises(CheckpointNotFound, match=not_found):
            act("bob")
    assert tinker.store.exists(ref) and tinker.store.expires_at(ref) is None
    # bob's live run that loaded another checkpoint, or only alice's weights, is not enough.
    bobs = add_model(tinker, "b:train:0", "bob")
    bobs.resumed_from = CheckpointRef("a:train:0", "weights", "step-0")
    with pytest.raises(CheckpointNotFound, match=not_found):
        tinker.set_ttl(ref, 60, "bob")
    # A run of carol's resumed from it does not let bob change it either.
    add_model(tinker, "c:train:0", "carol").resumed_from = ref
    with pytest.raises(CheckpointNotFound, match=not_found):
        tinker.delete(ref, "bob")
    # Once bob's own run resumed from it (a restarted kernel), bob may.
    bobs.resumed_from = ref
    tinker.set_ttl(ref, 60, "bob")
    assert tinker.store.expires_at(ref) is not None
    tinker.set_ttl(ref, None, "alice")
    assert tinker.store.expires_at(ref) is None
    tinker.delete(ref, "alice")
    assert not tinker.store.exists(ref)
    with pytest.raises(CheckpointNotFound):
        tinker.delete(ref, "alice")


def test_a_checkpoint_resumed_from_may_be_deleted_by_the_resumer(tmp_path):
    tinker = service(tmp_path)
    ref = saved_checkpoint(tinker, "a:train:0", "alice")
    add_model(tinker, "b:train:0", "bob").resumed_from = ref
    tinker.delete(ref, "bob")
    assert not tinker.store.exists(ref)


def test_a_file_is_its_uploaders_alone():
    files = FileStore()
    mine = files.add("alice", "adapter_config.json", "lora", b"{}")
    theirs = files.add("bob", "adapter_config.json", "lora", b"{ }")
    assert files.get("alice", mine.id) is mine
    for owner, file_id in (("bob", mine.id), ("alice", "file-never")):
        with pytest.raises(ApiError, match=f"no file with id '{file_id}'") as refused:
            files.get(owner, file_id, "config_file_id")
        assert refused.value.status == 404 and refused.value.param == "config_file_id"
        with pytest.raises(ApiError, match="no file with id") as refused:
            files.delete(owner, file_id)
        assert refused.value.status == 404 and refused.value.param == "file_id"
    with pytest.raises(ApiError) as refused:
        files.get("bob", "f" * 100)
    assert str(refused.value) == f"no file with id {'f' * 80!r}"  # an id is cut at 80
    assert (refused.value.status, refused.value.code) == (404, "file_not_found")
    assert [f["id"] for f in files.listing("alice")["data"]] == [mine.id]
    assert files.listing("carol") == {"object": "list", "data": []}
    assert files.delete("alice", mine.id) == {"id": mine.id, "object": "file", "deleted": True}
    assert files.listing("alice")["data"] == [] and files.get("bob", theirs.id) is theirs
    with pytest.raises(ApiError, match="no file with id"):
        files.get("alice", mine.id)


def test_a_lora_is_its_creators_alone():
    async def main():
        files = FileStore()
        loras = LoraRegistry(files, (MODEL,))

        def create(owner: str, name: str):
            ids = {
                param: files.add(owner, filename, "lora", filename.encode()).id
                for param, filename in (
                    ("config_file_id", "adapter_config.json"),
                    ("weights_file_id", "adapter_model.safetensors"),
                )
            }
            return loras.create(owner, LoraSpec(name, (MODEL,), ids))

        mine, same_name = create("alice", "shared-name"), create("bob", "shared-name")
        assert loras.get("alice", "shared-name") is mine
        assert loras.get("alice", mine.id) is mine
        assert loras.get("bob", "shared-name") is same_name
        for ref in (mine.id, "never-made"):
            with pytest.raises(
                ApiError, match=f"no LoRA named \\(or with id\\) '{ref}'"
            ) as refused:
                loras.get("bob" if ref == mine.id else "alice", ref, param="metadata.lora")
            assert refused.value.status == 404 and refused.value.param == "metadata.lora"
        with pytest.raises(ApiError) as refused:
            loras.get("bob", "n" * 100)
        assert str(refused.value) == f"no LoRA named (or with id) {'n' * 80!r}"
        assert (refused.value.status, refused.value.code) == (404, "lora_not_found")
        with pytest.raises(ApiError, match="no LoRA named") as refused:
            loras.delete("carol", "shared-name")
        assert refused.value.param == "name"
        assert [b["id"] for b in loras.listing("alice")["data"]] == [mine.id]
        assert loras.listing("carol") == {"object": "list", "data": []}
        deleted = loras.delete("alice", mine.id)
        assert deleted == {"id": mine.id, "object": "lora", "name": "shared-name", "deleted": True}
        assert mine.task.cancelled() or mine.task.cancelling()
        assert loras.listing("alice")["data"] == []
        assert loras.get("bob", "shared-name") is same_name
        with pytest.raises(ApiError, match="no LoRA named"):
            loras.get("alice", "shared-name")
        await loras.close()

    asyncio.run(main())
