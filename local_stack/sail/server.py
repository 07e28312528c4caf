"""The loopback Sail Responses API: background `POST /v1/responses` and `GET /v1/responses/{id}`.

It speaks exactly the subset `sail.SailTokenCompleter` uses (raw prompt tokens in, token ids
and logprobs out) so the real SDK runs unchanged against the tiny local model. Requests that
arrive together are decoded together (see `Batcher`); LoRA adapters are fetched from
loopback archive URLs and cached (see `AdapterCache`). Test knobs can inject latency and
faults (see `Knobs`), from the environment or at runtime via `POST /local/config`.
"""

from __future__ import annotations

import asyncio
import io
import ipaddress
import json
import os
import random
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import peft
import torch
from aiohttp import web

from helpers.kimi import offline_kimi_tokenizer
from helpers.scripted_policy import SCRIPTED_MODEL_NAME, scripted_completion
from local_stack.config import SAIL_API_KEY
from local_stack.engine.compute import run_compute
from local_stack.engine.model import BASE_MODEL_NAME, MAX_CONTEXT_TOKENS, load_base_model
from local_stack.engine.sampler import Completion, SamplingParams, sample_batch
from local_stack.engine.vocab import CompactVocab

COMPLETION_WINDOWS = ("balanced", "flex")
RETIRED_COMPLETION_WINDOWS = ("priority", "15m")
LOGPROBS_INCLUDE = "message.output_text.logprobs"
# How long a GET waits for its response to finish before answering `in_progress`. The SDK
# sleeps 20 s after any `in_progress`, so holding the GET is far cheaper; a batch of 64
# rollouts takes well under a second, and a training step ahead of it on the compute
# thread a few more.
LONG_POLL_SECONDS = 10.0
# A batch closes once no request has arrived for BATCH_QUIET_SECONDS (the SDK's concurrent
# creates trickle in over a few ms), or after BATCH_WINDOW_SECONDS at most.
BATCH_QUIET_SECONDS = 0.005
BATCH_WINDOW_SECONDS = 0.05
MAX_BATCH_SIZE = 256
ADAPTER_CACHE_SIZE = 8
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# Finished responses are forgotten after this long (the SDK retrieves them at once).
RESPONSE_TTL_SECONDS = 3600.0
FAULT_KINDS = ("failed", "expired", "http500", "malformed")


class RequestError(Exception):
    """A request the real service would refuse with a 4xx: carries an OpenAI-style error."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status

    def response(self) -> web.Response:
        error = {"message": str(self), "type": "invalid_request_error", "param": self.param}
        return web.json_response({"error": error}, status=self.status)


# ---------------------------------------------------------------------------------------
# Knobs: injected latency and faults, for tests and demos; all off by default.


@dataclass
class Knobs:
    """Latency (seconds before a response may report done) and fault fractions."""

    latency: float = 0.0
    faults: dict[str, float] = field(default_factory=dict)
    seed: int = 0

    @classmethod
    def from_env(cls) -> Knobs:
        knobs = cls()
        knobs.update(
            {
                "latency": os.environ.get("COURSE_SAIL_LATENCY") or 0.0,
                "faults": os.environ.get("COURSE_SAIL_FAULTS") or {},
                "seed": os.environ.get("COURSE_SAIL_SEED") or 0,
            }
        )
        return knobs

    def update(self, changes: dict[str, Any]) -> None:
        """Apply `{"latency", "faults", "seed"}`; faults as a dict or `failed=0.1,http500=0.05`."""
        unknown = set(changes) - {"latency", "faults", "seed"}
        if unknown:
            raise RequestError(f"unknown knobs: {sorted(unknown)}")
        latency = float(changes.get("latency", self.latency))
        faults = changes.get("faults", self.faults)
        if isinstance(faults, str):
            faults = dict(item.split("=", 1) for item in faults.split(",") if item.strip())
        faults = {kind.strip(): float(share) for kind, share in faults.items()}
        if set(faults) - set(FAULT_KINDS):
            raise RequestError(f"unknown fault kinds {sorted(set(faults) - set(FAULT_KINDS))}")
        if latency < 0 or any(s < 0 for s in faults.values()) or sum(faults.values()) > 1:
            raise RequestError("latency and fault fractions must be >= 0, fractions sum <= 1")
        self.latency, self.faults = latency, faults
        self.seed = int(changes.get("seed", self.seed))

    def as_dict(self) -> dict[str, Any]:
        return {"latency": self.latency, "faults": dict(self.faults), "seed": self.seed}

    def draw_fault(self, rng: random.Random) -> str | None:
        """Which fault, if any, this response suffers."""
        u = rng.random()
        for kind in FAULT_KINDS:
            u -= self.faults.get(kind, 0.0)
            if u < 0:
                return kind
        return None


# ---------------------------------------------------------------------------------------
# LoRA adapters: fetched from loopback archive URLs, checked, applied with PEFT (un-merged).


@dataclass
class Adapter:
    """A base model wrapped with one LoRA adapter, keyed by the lora name it was asked for."""

    source: str  # the archive URL without its query (signed URLs differ per request)
    config: dict[str, Any]  # the adapter's own adapter_config.json
    model: torch.nn.Module


class AdapterCache:
    """Adapters by `tinker_lora_name` (or URL), least recently used evicted.

    Concurrent requests for one new adapter share a single fetch.
    """

    def __init__(self) -> None:
        self._ready: dict[str, Adapter] = {}
        self._loading: dict[str, asyncio.Task[Adapter]] = {}

    async def get(self, url: str, given_config: str | None, name: str | None) -> Adapter:
        """The adapter at `url`, checked against `given_config` (every request is checked)."""
        source = _url_without_query(url)
        key = name or source
        adapter = self._ready.pop(key, None)
        if adapter is None or adapter.source != source:
            task = self._loading.get(key)
            if task is None:
                task = asyncio.ensure_future(_load_adapter(url, source))
                self._loading[key] = task
                task.add_done_callback(lambda _: self._loading.pop(key, None))
            adapter = await asyncio.shield(task)
        self._ready[key] = adapter  # most recently used goes last
        while len(self._ready) > ADAPTER_CACHE_SIZE:
            self._ready.pop(next(iter(self._ready)))
        if given_config is not None:
            check_adapter_config(given_config, adapter.config)
        return adapter


async def _load_adapter(url: str, source: str) -> Adapter:
    files = read_adapter_archive(await fetch_loopback(url))
    try:
        config = json.loads(files["adapter_config.json"])
    except json.JSONDecodeError as exc:
        raise RequestError(f"the adapter's adapter_config.json is not JSON: {exc}") from exc
    return Adapter(source, config, await run_compute(_apply_adapter, files))


def _url_without_query(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}{parts.path}"


async def fetch_loopback(url: str) -> bytes:
    """Download an adapter archive; only loopback hosts: the local stack is offline."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise RequestError(f"LoRA URL must be http(s), got {url!r}", param="metadata.lora")
    if not _is_loopback(parts.hostname or ""):
        raise RequestError(
            f"refusing to fetch a LoRA from non-loopback host {parts.hostname!r}: "
            "the local stack only serves adapters from 127.0.0.1",
            param="metadata.lora",
        )
    try:
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            async with session.get(url) as reply:
                if reply.status != 200:
                    raise RequestError(
                        f"fetching the LoRA archive gave HTTP {reply.status}", param="metadata.lora"
                    )
                return await reply.read()
    except aiohttp.ClientError as exc:
        raise RequestError(
            f"could not fetch the LoRA archive: {exc}", param="metadata.lora"
        ) from exc


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_adapter_archive(archive: bytes) -> dict[str, bytes]:
    """The two adapter files from a .tar or .tar.gz (compression sniffed), at its top level."""
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:*") as tar:
            members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
            missing = [name for name in ADAPTER_FILES if name not in members]
            if missing:
                raise RequestError(
                    f"LoRA archive lacks {', '.join(missing)} at its top level "
                    f"(it has {sorted(members)})",
                    param="metadata.lora",
                )
            return {name: tar.extractfile(members[name]).read() for name in ADAPTER_FILES}
    except tarfile.TarError as exc:
        raise RequestError(f"LoRA archive is not a tar file: {exc}", param="metadata.lora") from exc


def check_adapter_config(given_json: str, adapter_config: dict[str, Any]) -> None:
    """Refuse an adapter whose own config differs from the one the request names.

    Compares every key the given config has; list values compare as sets (PEFT does not
    keep the order of `target_modules`).
    """
    try:
        given = json.loads(given_json)
    except json.JSONDecodeError as exc:
        raise RequestError(
            f"tinker_adapter_config is not JSON: {exc}", param="metadata.tinker_adapter_config"
        ) from exc
    if not isinstance(given, dict):
        raise RequestError(
            "tinker_adapter_config must be a JSON object", param="metadata.tinker_adapter_config"
        )
    differing = [
        f"{key}: {given[key]!r} != {adapter_config.get(key)!r}"
        for key in sorted(given)
        if _normalized(given[key]) != _normalized(adapter_config.get(key))
    ]
    if differing:
        raise RequestError(
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


def _apply_adapter(files: dict[str, bytes]) -> torch.nn.Module:
    """A fresh base model with the adapter loaded by PEFT itself, left un-merged (exact)."""
    base, _ = load_base_model()
    with tempfile.TemporaryDirectory() as tmp:
        for name, content in files.items():
            Path(tmp, name).write_bytes(content)
        try:
            model = peft.PeftModel.from_pretrained(base, tmp, is_trainable=False)
        except Exception as exc:  # PEFT raises many types for an adapter that does not fit
            raise RequestError(f"the LoRA adapter does not fit the base model: {exc}") from exc
    return model.eval()


# ---------------------------------------------------------------------------------------
# Responses and the batcher.


@dataclass
class Job:
    """One accepted request on its way through the batcher."""

    prompt: list[int]  # compact ids
    params: SamplingParams
    model_key: str
    model: torch.nn.Module
    done: asyncio.Future[Completion]


@dataclass
class StoredResponse:
    """What `GET /v1/responses/{id}` reports about one request."""

    id: str
    created_at: float
    request: dict[str, Any]
    latency: float  # injected when it was created
    ready_at: float  # monotonic time before which it reports in_progress
    fault: str | None
    job: Job | None
    body: dict[str, Any] | None = None
    scripted: Completion | None = None  # notebook 04's scripted policy, in real Kimi ids


class Batcher:
    """Decodes concurrent requests together: one batch per adapter, on the compute thread.

    The first request wakes the loop, which waits while more keep arriving; requests that
    arrive while a batch runs form the next one.
    """

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator
        self.stats = {"batches": 0, "requests": 0, "largest_batch": 0}
        self._queue: list[Job] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def submit(self, job: Job) -> None:
        self._queue.append(job)
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            deadline = time.monotonic() + BATCH_WINDOW_SECONDS
            seen = 0
            while len(self._queue) > seen and time.monotonic() < deadline:
                seen = len(self._queue)
                await asyncio.sleep(BATCH_QUIET_SECONDS)
            self._wake.clear()
            jobs, self._queue = self._queue, []
            groups: dict[str, list[Job]] = {}
            for job in jobs:
                groups.setdefault(job.model_key, []).append(job)
            for group in groups.values():
                for start in range(0, len(group), MAX_BATCH_SIZE):
                    await self._decode(group[start : start + MAX_BATCH_SIZE])

    async def _decode(self, jobs: list[Job]) -> None:
        self.stats["batches"] += 1
        self.stats["requests"] += len(jobs)
        self.stats["largest_batch"] = max(self.stats["largest_batch"], len(jobs))
        try:
            completions = await run_compute(
                sample_batch,
                jobs[0].model,
                [job.prompt for job in jobs],
                [job.params for job in jobs],
                self.generator,
            )
        except Exception as exc:  # surface to every waiting request, keep the loop alive
            for job in jobs:
                if not job.done.done():
                    job.done.set_exception(exc)
            return
        for job, completion in zip(jobs, completions, strict=True):
            if not job.done.done():
                job.done.set_result(completion)


class SailService:
    """State behind the routes: base model, vocabulary, adapters, responses, knobs."""

    def __init__(self, knobs: Knobs) -> None:
        self.base_model, self.vocab = load_base_model()
        self.tokenizer = offline_kimi_tokenizer()  # for the `text` field; slow to build
        self.knobs = knobs
        self.fault_rng = random.Random(knobs.seed)
        self.batcher = Batcher(torch.Generator().manual_seed(knobs.seed))
        self.adapters = AdapterCache()
        self.responses: dict[str, StoredResponse] = {}

    def reseed(self) -> None:
        self.fault_rng.seed(self.knobs.seed)
        self.batcher.generator.manual_seed(self.knobs.seed)

    async def create(self, request: dict[str, Any]) -> StoredResponse:
        if request.get("model") == SCRIPTED_MODEL_NAME:
            return self._create_scripted(request)
        prompt_real, params = parse_sampling_request(request, self.vocab)
        metadata = request.get("metadata") or {}
        model_key, model = "base", self.base_model
        if metadata.get("lora"):
            adapter = await self.adapters.get(
                metadata["lora"],
                metadata.get("tinker_adapter_config"),
                metadata.get("tinker_lora_name"),
            )
            model_key, model = f"lora:{id(adapter)}", adapter.model
        fault = self.knobs.draw_fault(self.fault_rng)
        job = None
        if fault not in ("failed", "expired"):
            done = asyncio.get_running_loop().create_future()
            job = Job(self.vocab.to_compact(prompt_real), params, model_key, model, done)
            self.batcher.submit(job)
        self._forget_old_responses()
        stored = StoredResponse(
            id=f"resp_{uuid.uuid4().hex}",
            created_at=time.time(),
            request=request,
            latency=self.knobs.latency,
            ready_at=time.monotonic() + self.knobs.latency,
            fault=fault,
            job=job,
        )
        self.responses[stored.id] = stored
        return stored

    def _create_scripted(self, request: dict[str, Any]) -> StoredResponse:
        """Notebook 04's scripted shell policy (see helpers.scripted_policy): answered at once."""
        stop = request.get("stop") or []
        max_tokens = request.get("max_output_tokens") or MAX_CONTEXT_TOKENS
        try:
            tokens, logprobs, stop_reason = scripted_completion(
                request.get("metadata") or {}, stop, max_tokens, self.fault_rng
            )
        except ValueError as exc:
            raise RequestError(str(exc), param="metadata") from None
        stored = StoredResponse(
            id=f"resp_{uuid.uuid4().hex}",
            created_at=time.time(),
            request=request,
            latency=0.0,
            ready_at=0.0,
            fault=None,
            job=None,
            scripted=Completion(tokens, logprobs, stop_reason),
        )
        self.responses[stored.id] = stored
        return stored

    async def wait(self, stored: StoredResponse) -> dict[str, Any]:
        """The response's current body; waits up to LONG_POLL_SECONDS for it to finish.

        Under injected latency it answers at once, `in_progress` until the latency is over,
        as the real service does when a response takes a while.
        """
        if stored.body is not None:
            return stored.body
        if stored.ready_at > time.monotonic():
            return self.in_progress_body(stored)
        if stored.job is not None:
            if stored.latency == 0:
                await asyncio.wait({stored.job.done}, timeout=LONG_POLL_SECONDS)
            if not stored.job.done.done():
                return self.in_progress_body(stored)
        stored.body = self._final_body(stored)
        return stored.body

    def _final_body(self, stored: StoredResponse) -> dict[str, Any]:
        body = self._envelope(stored)
        if stored.fault in ("failed", "expired"):
            body["status"] = stored.fault
            body["error"] = {
                "code": "server_error" if stored.fault == "failed" else "expired",
                "message": f"injected fault: the response {stored.fault}",
            }
            return body
        if stored.scripted is not None:
            completion, token_ids = stored.scripted, stored.scripted.tokens
            prompt_length = len(stored.request.get("raw_prompt_tokens") or [])
        else:
            exc = stored.job.done.exception()
            if exc is not None:
                body["status"] = "failed"
                body["error"] = {"code": "server_error", "message": f"sampling failed: {exc}"}
                return body
            completion = stored.job.done.result()
            token_ids = self.vocab.to_real(completion.tokens)
            prompt_length = len(stored.job.prompt)
        body["output"] = [self._message(stored, token_ids, completion)]
        body["usage"] = {
            "input_tokens": prompt_length,
            "output_tokens": len(token_ids),
            "total_tokens": prompt_length + len(token_ids),
        }
        if completion.stop_reason == "length":
            body["status"] = "incomplete"
            body["incomplete_details"] = {"reason": "max_output_tokens"}
        else:
            body["status"] = "completed"
        return body

    def _message(
        self, stored: StoredResponse, token_ids: list[int], completion: Completion
    ) -> dict[str, Any]:
        text_block: dict[str, Any] = {
            "type": "output_text",
            "text": self.tokenizer.decode(token_ids),
            "annotations": [],
            "token_ids": token_ids,
            "stop_reason": completion.stop_reason,
        }
        if LOGPROBS_INCLUDE in (stored.request.get("include") or []):
            text_block["logprobs"] = [
                {"token_id": token, "logprob": logprob}
                for token, logprob in zip(token_ids, completion.logprobs, strict=True)
            ]
        return {
            "type": "message",
            "id": f"msg_{stored.id.removeprefix('resp_')}",
            "role": "assistant",
            "status": "completed",
            "content": [text_block],
        }

    def _envelope(self, stored: StoredResponse) -> dict[str, Any]:
        return {
            "id": stored.id,
            "object": "response",
            "created_at": int(stored.created_at),
            "model": stored.request.get("model"),
            "metadata": stored.request.get("metadata") or {},
            "output": [],
            "error": None,
            "incomplete_details": None,
        }

    def in_progress_body(self, stored: StoredResponse) -> dict[str, Any]:
        return {**self._envelope(stored), "status": "in_progress"}

    def _forget_old_responses(self) -> None:
        cutoff = time.time() - RESPONSE_TTL_SECONDS
        while self.responses:
            oldest = next(iter(self.responses.values()))
            if oldest.created_at > cutoff:
                break
            del self.responses[oldest.id]


def parse_sampling_request(
    request: dict[str, Any], vocab: CompactVocab
) -> tuple[list[int], SamplingParams]:
    """Validate a create body the way the real service would; returns real prompt ids."""
    if request.get("model") != BASE_MODEL_NAME:
        raise RequestError(
            f"model {request.get('model')!r} is not served here; the local stack serves "
            f"{BASE_MODEL_NAME!r}",
            param="model",
            status=404,
        )
    if request.get("stream"):
        raise RequestError("stream is not supported for raw-token requests", param="stream")
    prompt = request.get("raw_prompt_tokens")
    if not isinstance(prompt, list) or not prompt or not all(_is_int(t) for t in prompt):
        raise RequestError(
            "raw_prompt_tokens must be a non-empty list of token ids (the local stack serves "
            "raw-token requests only)",
            param="raw_prompt_tokens",
        )
    metadata = request.get("metadata") or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise RequestError("metadata must be an object of strings", param="metadata")
    check_completion_window(metadata.get("completion_window", "balanced"))
    room = MAX_CONTEXT_TOKENS - len(prompt)
    if room <= 0:
        raise RequestError(
            f"the prompt has {len(prompt)} tokens; the model's context is {MAX_CONTEXT_TOKENS}",
            param="raw_prompt_tokens",
        )
    max_tokens = request.get("max_output_tokens", room)
    if not _is_int(max_tokens) or max_tokens <= 0:
        raise RequestError(
            "max_output_tokens must be a positive integer", param="max_output_tokens"
        )
    temperature = request.get("temperature", 1.0)
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
        raise RequestError("temperature must be between 0 and 2", param="temperature")
    top_p = request.get("top_p", 1.0)
    if not isinstance(top_p, int | float) or not 0 < top_p <= 1:
        raise RequestError("top_p must be in (0, 1]", param="top_p")
    stop = request.get("stop") or []
    if not isinstance(stop, list) or not all(_is_int(t) for t in stop):
        raise RequestError(
            "stop must be a list of token ids (stop strings are not supported with "
            "raw_prompt_tokens)",
            param="stop",
        )
    # A stop id outside the compact vocabulary can never be sampled; dropping it keeps it
    # from aliasing the unknown token.
    known_stops = frozenset(c for c in vocab.to_compact(stop) if vocab.to_real([c])[0] in stop)
    params = SamplingParams(min(max_tokens, room), float(temperature), float(top_p), known_stops)
    return list(prompt), params


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
    raise RequestError(message, param="metadata.completion_window")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------
# Routes.

SERVICE = web.AppKey("sail_service", SailService)


def setup(app: web.Application) -> None:
    """Add the Sail routes and the knob endpoint; the model loads when the app starts."""
    app.router.add_post("/v1/responses", create_response)
    app.router.add_get("/v1/responses/{id}", retrieve_response)
    app.router.add_get("/local/config", get_config)
    app.router.add_post("/local/config", set_config)
    app.router.add_get("/local/stats", get_stats)
    app.on_startup.append(_start_service)
    app.on_cleanup.append(_stop_service)


async def _start_service(app: web.Application) -> None:
    app[SERVICE] = await run_compute(SailService, Knobs.from_env())


async def _stop_service(app: web.Application) -> None:
    await app[SERVICE].batcher.close()


def _authorized(request: web.Request) -> bool:
    return request.headers.get("Authorization", "") == f"Bearer {SAIL_API_KEY}"


def _unauthorized() -> web.Response:
    error = {
        "message": "invalid or missing API key (the local stack accepts SAIL_API_KEY="
        f"{SAIL_API_KEY})",
        "type": "authentication_error",
        "code": "invalid_api_key",
    }
    return web.json_response({"error": error}, status=401)


async def create_response(request: web.Request) -> web.Response:
    if not _authorized(request):
        return _unauthorized()
    service = request.app[SERVICE]
    try:
        body = await request.json()
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        stored = await service.create(body)
    except json.JSONDecodeError:
        return RequestError("the request body is not valid JSON").response()
    except RequestError as exc:
        return exc.response()
    if body.get("background"):
        return web.json_response({**service.in_progress_body(stored), "status": "queued"})
    while True:  # a foreground request waits for its result
        result = await service.wait(stored)
        if result["status"] != "in_progress":
            return web.json_response(result)
        await asyncio.sleep(0.05)


async def retrieve_response(request: web.Request) -> web.Response:
    if not _authorized(request):
        return _unauthorized()
    service = request.app[SERVICE]
    stored = service.responses.get(request.match_info["id"])
    if stored is None:
        return RequestError("no response with that id", status=404).response()
    body = await service.wait(stored)
    if body["status"] != "in_progress" and stored.fault == "http500":
        error = {"message": "injected fault: internal server error", "type": "server_error"}
        return web.json_response({"error": error}, status=500)
    if body["status"] != "in_progress" and stored.fault == "malformed":
        return web.Response(text=json.dumps(body)[:40], content_type="application/json")
    return web.json_response(body)


async def get_config(request: web.Request) -> web.Response:
    return web.json_response(request.app[SERVICE].knobs.as_dict())


async def get_stats(request: web.Request) -> web.Response:
    """Batcher counters, so tests and benchmarks can see requests being batched."""
    return web.json_response(request.app[SERVICE].batcher.stats)


async def set_config(request: web.Request) -> web.Response:
    """Change the knobs at runtime (tests); a `seed` also reseeds faults and sampling."""
    service = request.app[SERVICE]
    try:
        changes = await request.json()
        service.knobs.update(changes)
    except (json.JSONDecodeError, ValueError, TypeError, AttributeError) as exc:
        return RequestError(f"bad knob settings: {exc}").response()
    except RequestError as exc:
        return exc.response()
    if "seed" in changes:
        service.reseed()
    return web.json_response(service.knobs.as_dict())
