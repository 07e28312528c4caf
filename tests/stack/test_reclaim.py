"""What a client held is released once its process has left the stack, and only then.

A kernel that fills its share of LoRAs and exits must not leave the next kernel refused:
four such kernels used to hold all sixteen LoRA slots until `make stop`. Kernels here are
stand-in processes (`sleep`) registered in the stack's registry as `connect` registers a
kernel; each leaves in one of the ways a process can: killed, exiting cleanly, or its
registry entry removed. Checkpoints stay: a later run resumes from them.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from local_stack import config, registry
from local_stack.departures import DEPARTED_CHECK_SECONDS, release_departed
from local_stack.engine.model import ADAPTER_CONFIG_PATH
from local_stack.sail.loras import MAX_CLIENT_LORAS, MAX_LORAS
from local_stack.tinker.futures import FutureTable
from local_stack.tinker.state import FUTURE_RETENTION_SECONDS
from tests.isolation_support import assert_bystander_served, new_client, sail, tinker_json
from tests.sail_support import create_body
from tests.tinker_datums import MODEL
from tests.wait_support import wait_until

KERNELS = MAX_LORAS // MAX_CLIENT_LORAS  # kernels that together fill every LoRA slot
SESSION_BODY = {"tags": [], "user_metadata": None, "sdk_version": "x"}


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen]]:
    """Stand-ins for kernels' processes; each test starts what it needs."""
    started: list[subprocess.Popen] = []
    yield started
    for process in started:
        process.kill()
        process.wait()


def start_kernel(processes: list[subprocess.Popen], storage: Path) -> tuple[subprocess.Popen, str]:
    """A process registered as a new client of the stack, as `connect("local")` registers one."""
    process = subprocess.Popen(["sleep", "600"])
    processes.append(process)
    client = new_client("kernel")
    registry.add_client(storage, process.pid, client)
    return process, client


def upload(url: str, client: str, name: str, data: bytes) -> str:
    reply = sail(url, client, "POST", "/files", fields={"purpose": "lora", "file": (name, data)})
    assert reply.status == 200, reply.data
    return reply.json()["id"]


def create_lora(url: str, client: str, name: str, file_ids: list[str]):
    body = {
        "name": name,
        "supported_models": [MODEL],
        "config_file_id": file_ids[0],
        "weights_file_id": file_ids[1],
    }
    return sail(url, client, "POST", "/loras", json=body)


def lora_files(url: str, client: str) -> list[str]:
    """A config and a (broken) weights file: enough to hold a LoRA slot."""
    return [
        upload(url, client, "adapter_config.json", ADAPTER_CONFIG_PATH.read_bytes()),
        upload(url, client, "adapter_model.safetensors", b"w"),
    ]


def future_result(url: str, client: str, request_id: str) -> dict:
    def done() -> bool:
        reply = tinker_json(url, client, "/retrieve_future", {"request_id": request_id})
        assert reply.status == 200, reply.data[:300]
        results.append(reply.json())
        return results[-1].get("type") != "try_again"

    results: list[dict] = []
    wait_until(done, "a Tinker future", give_up_after=120)
    return results[-1]


def training_run(url: str, client: str) -> tuple[str, str, str]:
    """A training client of `client` with a saved sampler checkpoint: its session, model id
    and checkpoint path."""
    session = tinker_json(url, client, "/create_session", SESSION_BODY).json()["session_id"]
    new_model = {"session_id": session, "model_seq_id": 0, "base_model": MODEL}
    created = tinker_json(url, client, "/create_model", {**new_model, "lora_config": {"rank": 8}})
    model_id = future_result(url, client, created.json()["request_id"])["model_id"]
    save = {"model_id": model_id, "seq_id": 1, "path": "kept"}
    saved = tinker_json(url, client, "/save_weights_for_sampler", save).json()
    return session, model_id, future_result(url, client, saved["request_id"])["path"]


def test_departed_kernels_leftovers_never_refuse_a_new_kernel(local_stack, processes) -> None:
    url, storage = local_stack.url, local_stack.storage_dir
    kernels = [start_kernel(processes, storage) for _ in range(KERNELS)]
    for _, client in kernels:
        files = lora_files(url, client)
        for number in range(MAX_CLIENT_LORAS):
            assert create_lora(url, client, f"share-{number}", files).status == 200
    first = kernels[0][1]
    response_id = sail(url, first, "POST", "/responses", json=create_body()).json()["id"]
    session, model_id, checkpoint = training_run(url, first)
    _, stays = start_kernel(processes, storage)  # a kernel that does not leave
    stays_files = lora_files(url, stays)

    _, newcomer = start_kernel(processes, storage)
    newcomer_files = lora_files(url, newcomer)
    refused = create_lora(url, newcomer, "mine", newcomer_files)
    assert refused.status == 413 and "(you have 0)" in refused.json()["error"]["message"]

    # The stack notices a client whose entry is removed by hand only once it has seen it.
    time.sleep(2 * DEPARTED_CHECK_SECONDS)
    (killed, _), (exited, _), (unregistered, _), (also_killed, _) = kernels
    killed.kill()
    registry.remove_client(storage, exited.pid)  # what a process's exit does
    exited.kill()
    (storage / config.STACK_CLIENTS_DIR / str(unregistered.pid)).unlink()
    also_killed.kill()
    for process in (killed, exited, also_killed):
        process.wait()  # a zombie still counts as running

    def released(client: str) -> bool:
        return sail(url, client, "GET", "/loras").json()["data"] == []

    for _, client in kernels:
        wait_until(partial(released, client), "a departed kernel's LoRAs to be released")
        assert sail(url, client, "GET", "/files").json()["data"] == []
    assert create_lora(url, newcomer, "mine", newcomer_files).status == 200
    assert sail(url, first, "GET", f"/responses/{response_id}").status == 404
    assert tinker_json(url, first, "/get_info", {"model_id": model_id}).status == 404
    assert tinker_json(url, first, "/session_heartbeat", {"session_id": session}).status == 404
    # Its checkpoint stays on disk, for any client to resume from.
    assert (storage / "tinker" / checkpoint.removeprefix("tinker://")).is_dir()
    weights = tinker_json(url, newcomer, "/weights_info", {"tinker_path": checkpoint})
    assert weights.status == 200 and weights.json()["lora_rank"] == 8
    # What the kernels still running hold is theirs still.
    listed = sail(url, stays, "GET", "/files").json()["data"]
    assert {f["id"] for f in listed} == set(stays_files)
    assert [lora["name"] for lora in sail(url, newcomer, "GET", "/loras").json()["data"]] == [
        "mine"
    ]
    assert_bystander_served(url)
    assert sail(url, newcomer, "DELETE", "/loras/mine").status == 200


def test_a_client_is_released_once_however_it_left(tmp_path: Path, processes) -> None:
    """Killed, exited, or its entry deleted: released once, even if it came and went between
    two looks; a client still running, or one that never registered, is never released."""
    released: list[str] = []
    seen = release_departed(tmp_path, set(), released.append)
    killed, killed_client = start_kernel(processes, tmp_path)
    exited, exited_client = start_kernel(processes, tmp_path)
    unregistered, unregistered_client = start_kernel(processes, tmp_path)
    _, running_client = start_kernel(processes, tmp_path)
    seen = release_departed(tmp_path, seen, released.append)
    assert released == [] and seen == {
        killed_client,
        exited_client,
        unregistered_client,
        running_client,
    }
    brief, brief_client = start_kernel(processes, tmp_path)  # comes and goes unseen
    registry.remove_client(tmp_path, brief.pid)
    killed.kill()
    killed.wait()
    registry.remove_client(tmp_path, exited.pid)
    (tmp_path / config.STACK_CLIENTS_DIR / str(unregistered.pid)).unlink()
    seen = release_departed(tmp_path, seen, released.append)
    assert sorted(released) == sorted(
        [killed_client, exited_client, unregistered_client, brief_client]
    )
    assert seen == {running_client}
    release_departed(tmp_path, seen, released.append)
    assert len(released) == 4  # once each


def test_one_clients_failed_release_does_not_stop_the_others(tmp_path: Path, processes) -> None:
    first, first_client = start_kernel(processes, tmp_path)
    second, second_client = start_kernel(processes, tmp_path)
    for process in (first, second):
        registry.remove_client(tmp_path, process.pid)
    released: list[str] = []

    def release(client: str) -> None:
        if client == first_client:
            raise RuntimeError("a release that fails")
        released.append(client)

    release_departed(tmp_path, set(), release)
    assert released == [second_client]
    assert registry.departed_clients(tmp_path) == set()


def test_futures_are_forgotten_an_hour_after_they_finish() -> None:
    """A result nobody collects is held for FUTURE_RETENTION_SECONDS after it is ready,
    never while its work is still pending."""

    async def table_after_sweeps() -> tuple[FutureTable, dict[str, str]]:
        table = FutureTable()
        ids = {}
        for name in ("old", "recent", "pending"):
            ids[name], future = table.new("client")
            if name != "pending":
                future.resolve({"type": name})
        now = time.monotonic()
        table.get(ids["old"]).finished_at = now - FUTURE_RETENTION_SECONDS - 1
        table.forget_finished_before(now - FUTURE_RETENTION_SECONDS)
        return table, ids

    table, ids = asyncio.run(table_after_sweeps())
    assert table.get(ids["old"]) is None
    assert table.get(ids["recent"]) is not None and table.get(ids["pending"]) is not None
    table.forget_owner("client")  # the client leaves: pending work too
    assert all(table.get(request_id) is None for request_id in ids.values())
