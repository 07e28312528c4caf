"""LoRA adapters for sampling: fetched, checked, applied with PEFT (un-merged), cached.

A request names its adapter by URL. The adapter it gets is always the one that URL serves
now: every request (or burst of concurrent requests) downloads the archive, and a cached
adapter is reused only if it came from the same URL with the same bytes. Loading is where
hostile input would hurt, so it is bounded (see `adapter_archive`), checked before any
allocation (`check_lora_config`), and kept off the event loop: unpacking and checking in a
worker thread, PEFT on the compute thread.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import peft
import torch

from local_stack.engine.compute import run_compute
from local_stack.engine.model import (
    ADAPTER_CONFIG_PATH,
    BASE_MODEL_DIRS,
    BASE_MODEL_NAME,
    load_base_model,
)
from local_stack.http import ApiError, strict_json
from local_stack.sail.adapter_archive import Archive, fetch_archive, read_adapter_archive
from local_stack.sail.requests import LoraSource, is_finite_number

ADAPTER_CACHE_SIZE = 8
# Downloads and unpackings in flight at once: each may hold a few MB of archive.
ADAPTER_LOADS_AT_ONCE = 2
MAX_LORA_RANK = 32  # what Sail accepts for Kimi K2.6
MAX_CONFIG_BYTES = 64 * 1024
# The modules the stack trains; an adapter may target any of them, nothing else.
TARGET_MODULES = frozenset(json.loads(ADAPTER_CONFIG_PATH.read_text())["target_modules"])
# PEFT options that add modules or copy layers (a "layer_replication" can ask for a
# thousand layers): Tinker never writes them, and they would allocate before any check.
REFUSED_OPTIONS = (
    "layer_replication",
    "modules_to_save",
    "trainable_token_indices",
    "target_parameters",
    "use_dora",
)
_PARAM = "metadata.lora"
# Codes an uploaded LoRA's failed validation reports (`result_code`).
INVALID_CONFIG = "invalid_adapter_config"
INVALID_RANK = "invalid_rank"
ADAPTER_LOAD_FAILED = "adapter_load_failed"

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class Adapter:
    """The base model wrapped with one LoRA adapter, and where it came from."""

    source: str  # the archive URL without its query
    digest: str  # sha256 of the archive it was loaded from
    config: dict[str, Any]  # the adapter's own adapter_config.json
    model: torch.nn.Module


class AdapterCache:
    """Loaded adapters by source URL, least recently used evicted.

    Concurrent requests for one source share one download, and for one archive one load.
    """

    def __init__(self) -> None:
        self._ready: OrderedDict[str, Adapter] = OrderedDict()
        self._fetching: dict[str, asyncio.Task[Archive]] = {}
        self._loading: dict[tuple[str, str], asyncio.Task[Adapter]] = {}
        self._slots = asyncio.Semaphore(ADAPTER_LOADS_AT_ONCE)

    async def get(self, lora: LoraSource) -> Adapter:
        """The adapter `lora.url` serves now, checked against the request's config."""
        archive = await _shared(self._fetching, lora.source, lambda: self._fetch(lora.url))
        adapter = self._ready.get(lora.source)
        if adapter is None or adapter.digest != archive.digest:
            key = (lora.source, archive.digest)
            adapter = await _shared(self._loading, key, lambda: self._load(lora.source, archive))
        self._ready[lora.source] = adapter
        self._ready.move_to_end(lora.source)
        while len(self._ready) > ADAPTER_CACHE_SIZE:
            self._ready.popitem(last=False)
        if lora.given_config is not None:
            check_given_config(lora.given_config, adapter.config)
        return adapter

    async def _fetch(self, url: str) -> Archive:
        async with self._slots:
            return await fetch_archive(url)

    async def _load(self, source: str, archive: Archive) -> Adapter:
        async with self._slots:
            files, config = await asyncio.to_thread(_unpack_and_check, archive.data)
        return Adapter(source, archive.digest, config, await run_compute(apply_adapter, files))


async def _shared(tasks: dict[K, asyncio.Task[V]], key: K, start: Callable[[], Awaitable[V]]) -> V:
    """Await the task running for `key`, starting it if none is; callers share its result."""
    task = tasks.get(key)
    if task is None:
        task = asyncio.ensure_future(start())
        tasks[key] = task
        task.add_done_callback(lambda _: tasks.pop(key, None))
    # A request that goes away must not cancel the work others are waiting for.
    return await asyncio.shield(task)


def _unpack_and_check(archive: bytes) -> tuple[dict[str, bytes], dict[str, Any]]:
    """Blocking: the archive's two files and its parsed, checked adapter config."""
    files = read_adapter_archive(archive)
    return files, parse_adapter_config(files["adapter_config.json"])


def parse_adapter_config(raw: bytes, param: str = _PARAM) -> dict[str, Any]:
    """An adapter_config.json's bytes, parsed and checked (`check_lora_config`), or a 4xx
    naming `param`. Errors carry a `code`: uploaded LoRAs report it when validation fails."""
    if len(raw) > MAX_CONFIG_BYTES:
        raise ApiError(
            f"adapter_config.json is over {MAX_CONFIG_BYTES} bytes",
            param=param,
            code=INVALID_CONFIG,
        )
    try:
        config = strict_json(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(
            "adapter_config.json is not UTF-8", param=param, code=INVALID_CONFIG
        ) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ApiError(
            f"adapter_config.json is not JSON: {exc}", param=param, code=INVALID_CONFIG
        ) from None
    check_lora_config(config, param)
    return config


def check_lora_config(config: Any, param: str = _PARAM) -> None:
    """Refuse an adapter config this model cannot take, before PEFT allocates anything."""

    def refuse(problem: str, code: str = INVALID_CONFIG) -> ApiError:
        return ApiError(f"the adapter's adapter_config.json {problem}", param=param, code=code)

    if not isinstance(config, dict):
        raise refuse("is not a JSON object")
    if config.get("peft_type") != "LORA" or config.get("task_type", "CAUSAL_LM") != "CAUSAL_LM":
        raise refuse("must be a LORA adapter for CAUSAL_LM")
    patterns = {key: config.get(key) or {} for key in ("rank_pattern", "alpha_pattern")}
    if not all(isinstance(pattern, dict) for pattern in patterns.values()):
        raise refuse("has a rank_pattern or alpha_pattern that is not an object")
    ranks = [config.get("r"), *patterns["rank_pattern"].values()]
    if not all(_is_rank(r) for r in ranks):
        raise refuse(
            f"has rank {ranks}; ranks must be integers from 1 to {MAX_LORA_RANK}", INVALID_RANK
        )
    alphas = [config.get("lora_alpha"), *patterns["alpha_pattern"].values()]
    if not all(is_finite_number(alpha) for alpha in alphas):
        raise refuse(f"has lora_alpha {alphas}; it must be a finite number")
    targets = config.get("target_modules")
    if not isinstance(targets, list) or not targets or not set(targets) <= TARGET_MODULES:
        raise refuse(f"targets {targets!r}; it may target {sorted(TARGET_MODULES)}")
    refused = [option for option in REFUSED_OPTIONS if config.get(option)]
    if refused:
        raise refuse(f"sets {refused}, which Sail does not serve")


def _is_rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LORA_RANK


def check_given_config(given: dict[str, Any], adapter_config: dict[str, Any]) -> None:
    """Refuse an adapter whose own config differs from the one the request names.

    Compares every key the given config has; list values compare as sets (PEFT does not
    keep the order of `target_modules`).
    """
    differing = [
        f"{key}: {given[key]!r} != {adapter_config.get(key)!r}"
        for key in sorted(given)
        if _normalized(given[key]) != _normalized(adapter_config.get(key))
    ]
    if differing:
        raise ApiError(
            "tinker_adapter_config does not match the adapter's adapter_config.json "
            f"(given != adapter): {'; '.join(differing)}",
            param="metadata.tinker_adapter_config",
        )


def _normalized(value: Any) -> Any:
    if isinstance(value, list | tuple | set):
        return sorted(map(str, value))
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    return value


def apply_adapter(files: dict[str, bytes], param: str = _PARAM) -> torch.nn.Module:
    """A fresh base model with the adapter loaded by PEFT itself, left un-merged (exact).

    Blocking torch work: call it on the compute thread."""
    base, _ = load_base_model(_trained_on(files))
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            Path(tmp, name).write_bytes(content)
        try:
            model = peft.PeftModel.from_pretrained(base, tmp, is_trainable=False)
        except Exception as exc:  # PEFT raises many types for an adapter that does not fit
            raise ApiError(
                f"the LoRA adapter does not fit the base model: {exc}",
                param=param,
                code=ADAPTER_LOAD_FAILED,
            ) from None
    return model.eval()


def _trained_on(files: dict[str, bytes]) -> str:
    """The served base model the adapter's config names; the default one if it names none."""
    try:
        named = json.loads(files["adapter_config.json"]).get("base_model_name_or_path")
    except (KeyError, ValueError, AttributeError):
        named = None
    return named if isinstance(named, str) and named in BASE_MODEL_DIRS else BASE_MODEL_NAME
