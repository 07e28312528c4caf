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
allocation (`check_lora_config`), and kept off the event loop: unpacking and checking in a
worker thread, PEFT on the compute thread.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import peft
import safetensors.torch
import torch

from local_stack.engine.compute import run_compute
from local_stack.engine.model import ADAPTER_CONFIG_PATH, load_base_model
from local_stack.engine.tinker_layout import NotTinkerLayout, to_peft
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
_CONFIG_PARAM = "metadata.tinker_adapter_config"
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
        self._slots = asyncio.Semaphore(ADAPTER_LOADS_AT_ONCE)

    async def get(self, lora: LoraSource) -> Adapter:
        """The adapter `lora.url` serves now, checked against the request's config."""
        archive = await _shared(self._fetching, lora.source, lambda: self._fetch(lora.url))
        given = json.dumps(lora.given_config, sort_keys=True)
        digest = hashlib.sha256(f"{archive.digest} {given}".encode()).hexdigest()
        adapter = self._ready.get(lora.source)
        if adapter is None or adapter.digest != digest:
            key = (lora.source, digest)
            adapter = await _shared(
                self._loading, key, lambda: self._load(lora, archive.data, digest)
            )
        self._ready[lora.source] = adapter
        self._ready.move_to_end(lora.source)
        while len(self._ready) > ADAPTER_CACHE_SIZE:
            self._ready.popitem(last=False)
        return adapter

    async def _fetch(self, url: str) -> Archive:
        async with self._slots:
            return await fetch_archive(url)

    async def _load(self, lora: LoraSource, archive: bytes, digest: str) -> Adapter:
        async with self._slots:
            files, config = await asyncio.to_thread(
                peft_files_from_archive, archive, lora.given_config
            )
        return Adapter(lora.source, digest, config, await run_compute(apply_adapter, files))


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
    archive_config = _parse_json(files["adapter_config.json"], _PARAM)
    check_tinker_config(archive_config)
    if given is None:
        raise ApiError(
            "a Tinker LoRA URL needs tinker_adapter_config (the PEFT adapter_config.json "
            "the archive's tensors belong to): the archive's own config has only r and "
            "lora_alpha",
            param=_CONFIG_PARAM,
        )
    check_lora_config(given, _CONFIG_PARAM)
    check_given_config({key: given.get(key) for key in ("r", "lora_alpha")}, archive_config)
    try:
        tensors = to_peft(safetensors.torch.load(files["adapter_model.safetensors"]))
    except NotTinkerLayout as exc:
        raise ApiError(f"the LoRA archive is not in Tinker's layout: {exc}", param=_PARAM) from None
    except Exception as exc:  # safetensors raises several types for a malformed file
        raise ApiError(
            f"the LoRA archive's adapter_model.safetensors is unreadable: {exc}", param=_PARAM
        ) from None
    peft_files = {
        "adapter_config.json": json.dumps(given).encode(),
        "adapter_model.safetensors": safetensors.torch.save(tensors),
    }
    return peft_files, given


def check_tinker_config(config: Any) -> None:
    """A Tinker archive's config: `r` and `lora_alpha` in range, and none of the PEFT options
    that would allocate before any check."""
    if not isinstance(config, dict) or "r" not in config or "lora_alpha" not in config:
        raise ApiError(
            "the LoRA archive's adapter_config.json must be an object with r and lora_alpha "
            "(Tinker's layout)",
            param=_PARAM,
            code=INVALID_CONFIG,
        )
    _check_ranks_and_options(config, _PARAM)


def parse_adapter_config(raw: bytes, param: str = _PARAM) -> dict[str, Any]:
    """An adapter_config.json's bytes, parsed and checked (`check_lora_config`), or a 4xx
    naming `param`. Errors carry a `code`: uploaded LoRAs report it when validation fails."""
    config = _parse_json(raw, param)
    check_lora_config(config, param)
    return config


def _parse_json(raw: bytes, param: str) -> Any:
    """An adapter_config.json's bytes parsed, or a 4xx naming `param`."""
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
    return config


def check_lora_config(config: Any, param: str = _PARAM) -> None:
    """Refuse an adapter config this model cannot take, before PEFT allocates anything."""

    def refuse(problem: str, code: str = INVALID_CONFIG) -> ApiError:
        return ApiError(f"the adapter's adapter_config.json {problem}", param=param, code=code)

    if not isinstance(config, dict):
        raise refuse("is not a JSON object")
    if config.get("peft_type") != "LORA" or config.get("task_type", "CAUSAL_LM") != "CAUSAL_LM":
        raise refuse("must be a LORA adapter for CAUSAL_LM")
    _check_ranks_and_options(config, param)
    targets = config.get("target_modules")
    if not isinstance(targets, list) or not targets or not set(targets) <= TARGET_MODULES:
        raise refuse(f"targets {targets!r}; it may target {sorted(TARGET_MODULES)}")


def _check_ranks_and_options(config: dict[str, Any], param: str) -> None:
    """Ranks, alphas and the options that add modules: what PEFT would allocate from."""

    def refuse(problem: str, code: str = INVALID_CONFIG) -> ApiError:
        return ApiError(f"the adapter's adapter_config.json {problem}", param=param, code=code)

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
    refused = [option for option in REFUSED_OPTIONS if config.get(option)]
    if refused:
        raise refuse(f"sets {refused}, which Sail does not serve")


def _is_rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LORA_RANK


def check_given_config(given: dict[str, Any], adapter_config: dict[str, Any]) -> None:
    """Refuse an adapter whose archive config differs from the one the request names.

    Compares every key `given` has; list values compare as sets (PEFT does not keep the
    order of `target_modules`).
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
            param=_CONFIG_PARAM,
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
    base, _ = load_base_model()
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            Path(tmp, name).write_bytes(content)
        try:
            model = peft.PeftModel.from_pretrained(base, tmp, is_trainable=False)
            expected = peft.get_peft_model_state_dict(model, save_embedding_layers=False)
            given = safetensors.torch.load(files["adapter_model.safetensors"])
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
