"""Parse and validate a `POST /v1/responses` body into plain values, or refuse it (4xx).

Every field the service uses is checked here, type and range, so that nothing later can
fail on a value a client chose: a request that passes this layer can be sampled.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from local_stack.engine.checkpoints import CheckpointRef
from local_stack.engine.model import BASE_MODEL_DIRS, BASE_MODEL_NAME, MAX_CONTEXT_TOKENS
from local_stack.engine.sampler import SamplingParams
from local_stack.engine.vocab import CompactVocab
from local_stack.http import ApiError, strict_json

COMPLETION_WINDOWS = ("balanced", "flex")
RETIRED_COMPLETION_WINDOWS = ("priority", "15m")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
# Temperature 0 is greedy. Any other temperature divides the logits; below MIN_TEMPERATURE
# (a subnormal in the extreme) the scaled logits overflow to inf and the distribution is
# NaN, so the smallest accepted one is far from that edge and already as good as greedy.
MIN_TEMPERATURE = 0.01
MAX_TEMPERATURE = 2.0
# The nucleus is computed in float32, where a tiny top_p rounds to 0 and drops every token.
MIN_TOP_P = 0.001
MAX_TOKEN_ID = 2**31 - 1
MAX_STOP_IDS = 64
# A response keeps its metadata as long as the response is stored. Sail's own limits are not
# in its SDK, which sends at most four keys of its own (completion_window; with a Tinker LoRA,
# `lora`, a signed URL, `tinker_adapter_config`, compact JSON of about 300 characters, and
# `tinker_lora_name`) plus any the caller adds. Sixteen keys of 64 characters are the usual
# API bounds (OpenAI's); values may be longer than the usual 512, as a signed URL can be.
MAX_METADATA_KEYS = 16
MAX_METADATA_KEY_CHARS = 64
MAX_METADATA_VALUE_CHARS = 8192
MAX_METADATA_CHARS = 16384  # keys and values together


@dataclass(frozen=True)
class LoraSource:
    """Where a request's LoRA adapter lives and what the request says it is."""

    url: str
    source: str  # the URL without its query: signed URLs of one archive differ per request
    given_config: dict[str, Any] | None  # the request's `tinker_adapter_config`
    name: str | None  # the request's `tinker_lora_name` (a label; the URL decides)


@dataclass(frozen=True)
class NamedLora:
    """A LoRA uploaded to Sail (`POST /v1/loras`), named by its name or id; it is looked up
    among the LoRAs of the client that sent the request."""

    name_or_id: str


@dataclass(frozen=True)
class SamplingRequest:
    """A create body, checked: real prompt ids, sampling parameters (compact stop ids)."""

    client: str  # who sent it: the only client that may retrieve its response
    model: str
    prompt: list[int]
    params: SamplingParams
    metadata: dict[str, str]
    lora: LoraSource | NamedLora | None
    include_logprobs: bool
    background: bool


def parse_sampling_request(
    body: Any,
    vocabs: Mapping[str, CompactVocab],
    *,
    client: str,
    archive_prefix: str | None,
) -> SamplingRequest:
    """Validate a create body the way the real service would; `vocabs` by served model.

    `client` sent it (its LoRA names are its own, and so is the response); `archive_prefix`
    is where this stack's Tinker serves adapter archives, the only URLs `metadata.lora` may
    name (None: the stack serves none).
    """
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or model not in BASE_MODEL_DIRS:
        served = " or ".join(map(repr, BASE_MODEL_DIRS))
        raise ApiError(
            f"model {model!r:.80} is not served here; the local stack serves {served}",
            param="model",
            status=404,
        )
    vocab = vocabs[model]
    if body.get("stream"):
        raise ApiError("stream is not supported for raw-token requests", param="stream")
    prompt = _token_ids(body.get("raw_prompt_tokens"), "raw_prompt_tokens", MAX_CONTEXT_TOKENS)
    if not prompt:
        raise ApiError(
            "raw_prompt_tokens must be a non-empty list of token ids (the local stack serves "
            "raw-token requests only)",
            param="raw_prompt_tokens",
        )
    room = MAX_CONTEXT_TOKENS - len(prompt)
    if room <= 0:
        raise ApiError(
            f"the prompt has {len(prompt)} tokens; the model's context is {MAX_CONTEXT_TOKENS}",
            param="raw_prompt_tokens",
        )
    metadata = _metadata(body.get("metadata"))
    check_completion_window(metadata.get("completion_window", "balanced"))
    max_tokens = body.get("max_output_tokens", room)
    if not _is_int(max_tokens) or max_tokens <= 0:
        raise ApiError("max_output_tokens must be a positive integer", param="max_output_tokens")
    stop = _token_ids(body.get("stop") or [], "stop", MAX_STOP_IDS)
    # A stop id outside the compact vocabulary can never be sampled; dropping it keeps it
    # from aliasing the unknown token.
    known_stops = frozenset(c for c in vocab.to_compact(stop) if vocab.to_real([c])[0] in stop)
    params = SamplingParams(
        min(max_tokens, room), _temperature(body.get("temperature", 1.0)), _top_p(body), known_stops
    )
    include = body.get("include") or []
    if not isinstance(include, list) or not all(isinstance(item, str) for item in include):
        raise ApiError("include must be a list of strings", param="include")
    background = body.get("background", False)
    if not isinstance(background, bool):
        raise ApiError("background must be true or false", param="background")
    return SamplingRequest(
        client,
        model,
        prompt,
        params,
        metadata,
        _lora(metadata, archive_prefix),
        LOGPROBS_INCLUDE in include,
        background,
    )


def check_completion_window(window: Any) -> None:
    """Accept what the local tiny model offers; word refusals like the SDK's own checks."""
    if window in COMPLETION_WINDOWS:
        return
    hint = "use 'balanced' or 'flex'"
    if window in RETIRED_COMPLETION_WINDOWS:
        message = f"completion_window {window!r} is retired; {hint}"
    elif window == "asap":
        message = f"completion_window 'asap' is not supported for {BASE_MODEL_NAME}; {hint}"
    else:
        message = f"completion_window {window!r} is not supported; {hint}"
    raise ApiError(message, param="metadata.completion_window")


def _token_ids(value: Any, param: str, most: int) -> list[int]:
    if (
        not isinstance(value, list)
        or len(value) > most
        or not all(_is_int(t) and 0 <= t <= MAX_TOKEN_ID for t in value)
    ):
        raise ApiError(
            f"{param} must be a list of at most {most} token ids (integers from 0 to "
            f"{MAX_TOKEN_ID}; stop strings are not supported with raw_prompt_tokens)",
            param=param,
        )
    return list(value)


def _temperature(value: Any) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not (value == 0 or MIN_TEMPERATURE <= value <= MAX_TEMPERATURE)
    ):
        raise ApiError(
            f"temperature must be 0 (greedy) or between {MIN_TEMPERATURE} and "
            f"{MAX_TEMPERATURE}, got {value!r}",
            param="temperature",
        )
    return float(value)


def _top_p(body: dict[str, Any]) -> float:
    value = body.get("top_p", 1.0)
    if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_TOP_P <= value <= 1:
        raise ApiError(f"top_p must be between {MIN_TOP_P} and 1, got {value!r}", param="top_p")
    return float(value)


def _metadata(value: Any) -> dict[str, str]:
    metadata = {} if value is None else value
    if not isinstance(metadata, dict):
        raise ApiError("metadata must be an object of strings", param="metadata")
    if len(metadata) > MAX_METADATA_KEYS:
        raise ApiError(
            f"metadata has {len(metadata)} keys; at most {MAX_METADATA_KEYS} are allowed",
            param="metadata",
        )
    if not all(isinstance(v, str) for v in metadata.values()):
        raise ApiError("metadata must be an object of strings", param="metadata")
    longest_key = max(map(len, metadata), default=0)
    longest_value = max(map(len, metadata.values()), default=0)
    total = sum(map(len, metadata)) + sum(map(len, metadata.values()))
    for size, limit, what in (
        (longest_key, MAX_METADATA_KEY_CHARS, "a metadata key"),
        (longest_value, MAX_METADATA_VALUE_CHARS, "a metadata value"),
        (total, MAX_METADATA_CHARS, "metadata (keys and values together)"),
    ):
        if size > limit:
            raise ApiError(
                f"{what} has {size} characters; at most {limit} are allowed", param="metadata"
            )
    return metadata


def _lora(metadata: dict[str, str], archive_prefix: str | None) -> LoraSource | NamedLora | None:
    """The adapter `metadata.lora` names: a Tinker archive URL (with its adapter config) or,
    when it is no URL, the name or id of an uploaded LoRA (`local_stack.sail.loras`)."""
    url = metadata.get("lora")
    if not url:
        return None
    if "://" not in url:
        return NamedLora(url)
    check_archive_url(url, archive_prefix)
    parts = urlsplit(url)
    given = metadata.get("tinker_adapter_config")
    if given is not None:
        try:
            given = strict_json(given)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise ApiError(
                f"tinker_adapter_config is not JSON: {exc}", param="metadata.tinker_adapter_config"
            ) from None
        if not isinstance(given, dict):
            raise ApiError(
                "tinker_adapter_config must be a JSON object",
                param="metadata.tinker_adapter_config",
            )
    source = f"{parts.scheme}://{parts.netloc}{parts.path}"
    return LoraSource(url, source, given, metadata.get("tinker_lora_name"))


def check_archive_url(url: str, archive_prefix: str | None) -> None:
    """Only an archive URL of this stack's own Tinker (`<archive_prefix><model_id>/<kind>/
    <name>.tar`, with any query): the stack stands in for a cloud whose signed URLs point at
    Tinker's storage, and must not be made to fetch any other address or route on the
    machine. Checked before anything is fetched."""
    parts = urlsplit(url)
    base = f"{parts.scheme}://{parts.netloc}{parts.path}"
    path = base.removeprefix(archive_prefix or "")
    if archive_prefix is None or path == base or parts.fragment or not _names_checkpoint(path):
        raise ApiError(
            f"metadata.lora must be an adapter archive URL of this stack's Tinker "
            f"({archive_prefix or 'none is served'}<model_id>/<kind>/<name>.tar), "
            f"got {url[:200]!r}",
            param="metadata.lora",
        )


def _names_checkpoint(path: str) -> bool:
    """Whether `path` is `<model_id>/<kind>/<name>.tar` with names a checkpoint can have."""
    pieces = path.split("/")
    if len(pieces) != 3 or not pieces[2].endswith(".tar"):
        return False
    try:
        CheckpointRef(pieces[0], pieces[1], pieces[2].removesuffix(".tar"))
    except ValueError:
        return False
    return True


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A JSON number that is neither NaN nor infinite (bools are not numbers)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
