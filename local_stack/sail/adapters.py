"""LoRA adapters for sampling: fetched, checked, applied with PEFT (un-merged), cached.

A request names its adapter by URL. The URL serves a Tinker archive: the adapter in Tinker's
own layout (`local_stack.engine.tinker_layout`), whose config holds only `r` and
`lora_alpha`. So the PEFT adapter is built from two sources, as the SDK's contract implies
(`SailTokenCompleter` refuses `tinker_lora_signed_url` without `adapter_config`): the
archive's tensors, renamed to PEFT's names, and the request's `tinker_adapter_config`, which
must agree with the archive on `r` and `lora_alpha`. How real Sail converts an archive is
not documented; the result is the same PEFT model either way.

The adapter a request gets is always the one its URL serves now: every request (or burst
of concurrent requests) downloads the archive, and a cached adapter is reused only if it
came from the same URL with the same bytes and the same config. Loading is where
hostile input would hurt, so it is bounded (see `adapter_archive`), checked before any
allocation (`lora_config.check_lora_config`, an allow-list), and kept off the event loop: unpacking
and checking in a worker thread, PEFT on the compute thread. PEFT is given the checked
config, re-written, never the bytes that arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import peft
import safetensors.torch
import torch

from local_stack.engine.compute import run_compute
from local_stack.engine.model import (
    BASE_MODEL_DIRS,
    BASE_MODEL_NAME,
    load_base_model,
)
from local_stack.engine.tinker_layout import NotTinkerLayout, to_peft
from local_stack.http import ApiError
from local_stack.sail.adapter_archive import Archive, fetch_archive, read_adapter_archive
from local_stack.sail.lora_config import (
    CONFIG_PARAM,
    LORA_PARAM,
    check_given_config,
    check_given_keys,
    check_lora_config,
    check_tinker_config,
    parse_config_json,
)
from local_stack.sail.requests import LoraSource

ADAPTER_CACHE_SIZE = 8
# Downloads and unpackings in flight at once, per client: each may hold a few MB of archive.
# Per client, so that one client's slow archives cannot keep another's adapter waiting.
ADAPTER_LOADS_AT_ONCE = 2
# The code an uploaded LoRA's failed validation reports (`result_code`) when PEFT refuses it.
ADAPTER_LOAD_FAILED = "adapter_load_failed"

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class Adapter:
    """The base model wrapped with one LoRA adapter, and where it came from."""

    source: str  # the archive URL without its query
    digest: str  # sha256 of the archive (and the config) it was loaded from
    config: dict[str, Any]  # the PEFT adapter_config.json it was loaded with
    model: torch.nn.Module


class AdapterCache:
    """Loaded adapters by source URL, least recently used evicted.

    Concurrent requests for one source share one download, and for one archive one load.
    """

    def __init__(self) -> None:
        self._ready: OrderedDict[str, Adapter] = OrderedDict()
        self._fetching: dict[str, asyncio.Task[Archive]] = {}
        self._loading: dict[tuple[str, str], asyncio.Task[Adapter]] = {}
        self._slots = ClientSlots(ADAPTER_LOADS_AT_ONCE)

    async def get(self, lora: LoraSource, client: str = "") -> Adapter:
        """The adapter `lora.url` serves now, built with the request's config; its download
        and load count against `client`'s slots and compute turns."""
        if lora.given_config is not None:
            check_given_keys(lora.given_config)  # before anything is fetched
        archive = await _shared(self._fetching, lora.source, lambda: self._fetch(lora.url, client))
        given = json.dumps(lora.given_config, sort_keys=True)
        digest = hashlib.sha256(f"{archive.digest} {given}".encode()).hexdigest()
        adapter = self._ready.get(lora.source)
        if adapter is None or adapter.digest != digest:
            key = (lora.source, digest)
            adapter = await _shared(
                self._loading, key, lambda: self._load(lora, archive.data, digest, client)
            )
        self._ready[lora.source] = adapter
        self._ready.move_to_end(lora.source)
        while len(self._ready) > ADAPTER_CACHE_SIZE:
            self._ready.popitem(last=False)
        return adapter

    async def _fetch(self, url: str, client: str) -> Archive:
        async with self._slots.held(client):
            return await fetch_archive(url)

    async def _load(self, lora: LoraSource, archive: bytes, digest: str, client: str) -> Adapter:
        async with self._slots.held(client):
            files, config = await asyncio.to_thread(
                peft_files_from_archive, archive, lora.given_config
            )
        weights = files["adapter_model.safetensors"]
        model = await run_compute(apply_adapter, config, weights, client=client)
        return Adapter(lora.source, digest, config, model)


class ClientSlots:
    """At most `per_client` holders at once for each client, the clients independent."""

    def __init__(self, per_client: int) -> None:
        self._per_client = per_client
        self._slots: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}  # holders and waiters, to forget idle clients

    @contextlib.asynccontextmanager
    async def held(self, client: str) -> AsyncIterator[None]:
        slots = self._slots.setdefault(client, asyncio.Semaphore(self._per_client))
        self._users[client] = self._users.get(client, 0) + 1
        try:
            async with slots:
                yield
        finally:
            self._users[client] -= 1
            if not self._users[client]:
                del self._users[client], self._slots[client]


async def _shared(tasks: dict[K, asyncio.Task[V]], key: K, start: Callable[[], Awaitable[V]]) -> V:
    """Await the task running for `key`, starting it if none is; callers share its result."""
    task = tasks.get(key)
    if task is None:
        task = asyncio.ensure_future(start())
        tasks[key] = task
        task.add_done_callback(lambda _: tasks.pop(key, None))
    # A request that goes away must not cancel the work others are waiting for.
    return await asyncio.shield(task)


def peft_files_from_archive(
    archive: bytes, given: dict[str, Any] | None
) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Blocking: PEFT's two files built from a Tinker archive and the request's config.

    Refuses (4xx) an archive that is not in Tinker's layout, a missing or impossible
    config, and a config that disagrees with the archive on `r` or `lora_alpha`."""
    files = read_adapter_archive(archive)
    archive_config = parse_config_json(files["adapter_config.json"], LORA_PARAM)
    check_tinker_config(archive_config)
    if given is None:
        raise ApiError(
            "a Tinker LoRA URL needs tinker_adapter_config (the PEFT adapter_config.json "
            "the archive's tensors belong to): the archive's own config has only r and "
            "lora_alpha",
            param=CONFIG_PARAM,
        )
    check_lora_config(given, CONFIG_PARAM)
    check_given_config({key: given.get(key) for key in ("r", "lora_alpha")}, archive_config)
    try:
        tensors = to_peft(safetensors.torch.load(files["adapter_model.safetensors"]))
    except NotTinkerLayout as exc:
        raise ApiError(
            f"the LoRA archive is not in Tinker's layout: {exc}", param=LORA_PARAM
        ) from None
    except Exception as exc:  # safetensors raises several types for a malformed file
        raise ApiError(
            f"the LoRA archive's adapter_model.safetensors is unreadable: {exc}", param=LORA_PARAM
        ) from None
    peft_files = {
        "adapter_config.json": json.dumps(given).encode(),
        "adapter_model.safetensors": safetensors.torch.save(tensors),
    }
    return peft_files, given


def apply_adapter(
    config: dict[str, Any], weights: bytes, param: str = LORA_PARAM
) -> torch.nn.Module:
    """A fresh base model with the adapter loaded by PEFT itself, left un-merged (exact).

    `config` must have passed `check_lora_config`; PEFT reads it re-written from the
    checked values, so nothing the check did not see reaches PEFT. Blocking torch work:
    call it on the compute thread."""
    base, _ = load_base_model(_trained_on(config))
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "adapter_config.json").write_text(json.dumps(config))
        Path(tmp, "adapter_model.safetensors").write_bytes(weights)
        try:
            model = peft.PeftModel.from_pretrained(base, tmp, is_trainable=False)
            expected = peft.get_peft_model_state_dict(model, save_embedding_layers=False)
            given = safetensors.torch.load(weights)
        except Exception as exc:  # PEFT raises many types for an adapter that does not fit
            raise ApiError(
                f"the LoRA adapter does not fit the base model: {exc}",
                param=param,
                code=ADAPTER_LOAD_FAILED,
            ) from None
    # PEFT only warns about tensors it did not use or did not find: a file in another
    # layout (Tinker's `unembed_tokens`, say) would otherwise load as a partial adapter.
    unexpected, missing = sorted(given.keys() - expected.keys()), expected.keys() - given.keys()
    if unexpected or missing:
        raise ApiError(
            f"the LoRA weights do not match its config: {len(unexpected)} tensors the config "
            f"has no module for (first {unexpected[:1]}), {len(missing)} modules without weights "
            "(is the file in PEFT's layout, e.g. converted with build_lora_adapter?)",
            param=param,
            code=ADAPTER_LOAD_FAILED,
        )
    return model.eval()


def _trained_on(config: dict[str, Any]) -> str:
    """The served base model the adapter's config names; the default one if it names none."""
    named = config.get("base_model_name_or_path")
    return named if isinstance(named, str) and named in BASE_MODEL_DIRS else BASE_MODEL_NAME
