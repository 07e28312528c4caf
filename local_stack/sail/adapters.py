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
allocation (`check_lora_config`, an allow-list), and kept off the event loop: unpacking
and checking in a worker thread, PEFT on the compute thread. PEFT is given the checked
config, re-written, never the bytes that arrived.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
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
    ADAPTER_CONFIG_PATH,
    BASE_MODEL_DIRS,
    BASE_MODEL_NAME,
    load_base_model,
)
from local_stack.engine.tinker_layout import NotTinkerLayout, to_peft
from local_stack.http import ApiError, strict_json
from local_stack.sail.adapter_archive import Archive, fetch_archive, read_adapter_archive
from local_stack.sail.requests import LoraSource, is_finite_number

Check = Callable[[Any], bool]

ADAPTER_CACHE_SIZE = 8
# Downloads and unpackings in flight at once, per client: each may hold a few MB of archive.
# Per client, so that one client's slow archives cannot keep another's adapter waiting.
ADAPTER_LOADS_AT_ONCE = 2
MAX_LORA_RANK = 32  # what Sail accepts for Kimi K2.6
MAX_CONFIG_BYTES = 64 * 1024
# The modules the stack trains; an adapter may target any of them, nothing else.
TARGET_MODULES = frozenset(json.loads(ADAPTER_CONFIG_PATH.read_text())["target_modules"])
# PEFT matches module names, pattern keys and layer patterns as regular expressions, so a
# client's pattern could backtrack for ever while holding the interpreter lock (a
# `{"(.|.)*X": 8}` rank_pattern froze the whole stack). Only plain, dotted module names.
PLAIN_NAME = re.compile(r"[A-Za-z0-9_]{1,64}(\.[A-Za-z0-9_]{1,64}){0,7}")
MAX_PATTERN_ENTRIES = 64
MAX_LAYER_INDEX = 1023
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
    """A Tinker archive's config: `r` and `lora_alpha`, and any other key one PEFT writes, each
    in the range `check_lora_config` accepts."""

    def refuse(problem: str, code: str = INVALID_CONFIG) -> ApiError:
        return ApiError(
            f"the LoRA archive's adapter_config.json {problem}", param=_PARAM, code=code
        )

    if not isinstance(config, dict) or "r" not in config or "lora_alpha" not in config:
        raise refuse("must be an object with r and lora_alpha (Tinker's layout)")
    _check_known_keys(config, refuse)
    _check_values(config, refuse)


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


def _plain_names(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) <= MAX_PATTERN_ENTRIES
        and all(isinstance(name, str) and PLAIN_NAME.fullmatch(name) for name in value)
    )


def _pattern(check_value: Check) -> Check:
    """A rank_pattern or alpha_pattern: plain module names to checked values."""
    return lambda value: (
        isinstance(value, dict)
        and _plain_names(list(value))
        and all(check_value(v) for v in value.values())
    )


def _is_off(value: Any) -> bool:
    """An option left at PEFT's default off value (None, false or empty)."""
    return value is None or value is False or value == [] or value == {}


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= 256


def _is_rank(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_LORA_RANK


def _is_layer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_LAYER_INDEX


RANK_RULE = f"ranks must be integers from 1 to {MAX_LORA_RANK}"
PLAIN_RULE = f"a list of at most {MAX_PATTERN_ENTRIES} plain module names (no patterns)"
# Every key PEFT writes into a LoRA's adapter_config.json: how its value is checked, and
# what the refusal says is accepted. A key not listed here is refused.
KNOWN_KEYS: dict[str, tuple[Check, str]] = {
    "peft_type": (lambda v: v == "LORA", "'LORA'"),
    "task_type": (lambda v: v in ("CAUSAL_LM", None), "'CAUSAL_LM'"),
    "base_model_name_or_path": (lambda v: v is None or _is_text(v), "a model id"),
    "revision": (lambda v: v is None or _is_text(v), "null or a revision"),
    "peft_version": (lambda v: v is None or _is_text(v), "null or a version"),
    "auto_mapping": (_is_off, "null"),
    "inference_mode": (lambda v: isinstance(v, bool), "true or false"),
    "r": (_is_rank, RANK_RULE),
    "lora_alpha": (is_finite_number, "a finite number"),
    "lora_dropout": (lambda v: is_finite_number(v) and 0 <= v < 1, "a number from 0 to below 1"),
    "target_modules": (
        lambda v: isinstance(v, list) and bool(v) and set(v) <= TARGET_MODULES,
        f"a non-empty list of {sorted(TARGET_MODULES)}",
    ),
    "exclude_modules": (lambda v: v is None or _plain_names(v), f"null or {PLAIN_RULE}"),
    "rank_pattern": (_pattern(_is_rank), "plain module names (no patterns) mapped to ranks"),
    "alpha_pattern": (
        _pattern(is_finite_number),
        "plain module names (no patterns) mapped to finite numbers",
    ),
    "layers_to_transform": (
        lambda v: v is None or _is_layer(v) or (isinstance(v, list) and all(map(_is_layer, v))),
        f"null, or layer indices from 0 to {MAX_LAYER_INDEX}",
    ),
    "layers_pattern": (
        lambda v: v is None or _plain_names(v if isinstance(v, list) else [v]),
        f"null, a plain module name or {PLAIN_RULE}",
    ),
    # Only initialisations that cost one cheap pass over the weights (which loading then
    # overwrites). PiSSA, OLoRA, LoftQ, CorDA, EVA and the rest run SVDs or data passes:
    # one `"pissa_niter_100000000"` blocked the compute thread for good.
    "init_lora_weights": (
        lambda v: v is True or v is False or v == "gaussian",
        "true, false or 'gaussian'",
    ),
    "fan_in_fan_out": (lambda v: isinstance(v, bool), "true or false"),
    "use_rslora": (lambda v: isinstance(v, bool), "true or false"),
    "bias": (lambda v: v == "none", "'none'"),
    "megatron_core": (lambda v: v in (None, "megatron.core"), "'megatron.core'"),
    "qalora_group_size": (
        lambda v: isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1024,
        "an integer from 1 to 1024",
    ),
    # Options Tinker never writes, off: most add modules or copy layers before any check
    # (a layer_replication can ask for a thousand layers), or run long initialisations.
    **{
        key: (_is_off, "null or false (Sail does not serve it)")
        for key in (
            "modules_to_save",
            "layer_replication",
            "trainable_token_indices",
            "target_parameters",
            "use_dora",
            "lora_bias",
            "use_qalora",
            "use_bdlora",
            "ensure_weight_tying",
            "megatron_config",
            "loftq_config",
            "eva_config",
            "corda_config",
            "lora_ga_config",
            "velora_config",
            "monteclora_config",
            "arrow_config",
            "kasa_config",
            "alora_invocation_tokens",
        )
    },
}
REQUIRED_KEYS = ("peft_type", "r", "lora_alpha", "target_modules")


def check_lora_config(config: Any, param: str = _PARAM) -> None:
    """Refuse an adapter config unless every key is one PEFT writes for a LoRA and every
    value is one the stack accepts for it (`KNOWN_KEYS`), before PEFT sees any of it."""

    def refuse(problem: str, code: str = INVALID_CONFIG) -> ApiError:
        return ApiError(f"the adapter's adapter_config.json {problem}", param=param, code=code)

    if not isinstance(config, dict):
        raise refuse("is not a JSON object")
    if config.get("peft_type") != "LORA" or config.get("task_type", "CAUSAL_LM") != "CAUSAL_LM":
        raise refuse("must be a LORA adapter for CAUSAL_LM")
    _check_known_keys(config, refuse)
    missing = [key for key in REQUIRED_KEYS if key not in config]
    if missing:
        raise refuse(f"lacks {missing}")
    _check_values(config, refuse)


def _check_known_keys(config: dict[str, Any], refuse: Callable[..., ApiError]) -> None:
    unknown = sorted(set(config) - set(KNOWN_KEYS))
    if unknown:
        raise refuse(
            f"has keys the local stack does not know, {str(unknown)[:200]}: it accepts only "
            "the keys PEFT writes for a LoRA adapter"
        )


def _check_values(config: dict[str, Any], refuse: Callable[..., ApiError]) -> None:
    """Ranks first (what PEFT would allocate by), then every value by its key's rule."""
    patterns = config.get("rank_pattern") or {}
    ranks = [config["r"], *(patterns.values() if isinstance(patterns, dict) else [])]
    if not all(map(_is_rank, ranks)):
        raise refuse(f"has rank {ranks}; {RANK_RULE}", INVALID_RANK)
    for key, value in config.items():
        accepted, rule = KNOWN_KEYS[key]
        if not accepted(value):
            raise refuse(f"has {key} {_shown(value)}; {key} must be {rule}")


def _shown(value: Any) -> str:
    text = json.dumps(value)  # the config came from JSON
    return text if len(text) <= 120 else text[:117] + "..."


def check_given_keys(given: dict[str, Any]) -> None:
    """A request's `tinker_adapter_config` is only compared with the adapter's own config
    (`check_given_config`), but it too may hold only keys PEFT writes for a LoRA."""
    unknown = sorted(set(given) - set(KNOWN_KEYS))
    if unknown:
        raise ApiError(
            f"tinker_adapter_config has keys the local stack does not know, "
            f"{str(unknown)[:200]}: it accepts only the keys PEFT writes for a LoRA adapter",
            param="metadata.tinker_adapter_config",
        )


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


def apply_adapter(config: dict[str, Any], weights: bytes, param: str = _PARAM) -> torch.nn.Module:
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
