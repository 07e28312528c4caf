"""The Sail service's state: the model, adapters, the batcher and the responses it answers.

Knows nothing of HTTP: it takes checked `SamplingRequest`s and hands back response bodies.
The knobs it is given (latency, faults, seed; owned by the control plane) decide when a
response may report done and whether it suffers an injected fault.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kimi import offline_kimi_tokenizer
from local_stack.control.knobs import ClientKnobs
from local_stack.engine.model import BASE_MODEL_DIRS, BASE_MODEL_NAME, load_base_model
from local_stack.http import ApiError
from local_stack.lanes import SHARED_LANE, Lanes
from local_stack.sail import wire
from local_stack.sail.adapters import Adapter, AdapterCache
from local_stack.sail.batcher import Batcher, Job
from local_stack.sail.files import FileStore
from local_stack.sail.loras import LoraRegistry
from local_stack.sail.requests import LoraSource, NamedLora, SamplingRequest

# How long a GET waits for its response to finish before answering `in_progress`. The SDK
# sleeps 20 s after any `in_progress`, so holding the GET is far cheaper; a batch of 64
# rollouts takes well under a second, and a training step ahead of it on the compute
# thread a few more.
LONG_POLL_SECONDS = 10.0
FOREGROUND_POLL_SECONDS = 0.05
# Responses are forgotten after this long (the SDK retrieves them at once), and the oldest
# beyond MAX_STORED_RESPONSES, so a flood of creates cannot grow the server without bound.
RESPONSE_TTL_SECONDS = 3600.0
MAX_STORED_RESPONSES = 20_000
# Responses one client holds at most (queued, sampling, or done and not yet forgotten; keys no
# process registered share one quota, `local_stack.lanes`). A GRPO step of the course creates
# a few hundred at once. At the cap the client's oldest finished response is forgotten for
# the new one (the SDK retrieves each as soon as it is done), so one client's flood never
# pushes out another's responses; if none has finished, the create is refused.
MAX_RESPONSES_PER_CLIENT = 4096
# Faults decided at creation that end a response without sampling it.
ENDING_FAULTS = {"failed": "server_error", "expired": "expired"}
# Faults that refuse the create itself, as the real service answers them.
REFUSING_FAULTS = {
    "http429": ApiError(
        "injected fault: rate limit reached, retry later", status=429, code="rate_limit_exceeded"
    ),
    "unauthorized": ApiError("injected fault: the API key was refused", status=401),
    "timeout": ApiError("injected fault: the request timed out upstream", status=504),
}
# How long a create with the `timeout` fault is held before it answers 504: longer than the
# course's request timeout, so the client gives up first.
TIMEOUT_FAULT_HOLD_SECONDS = 90.0
# At most this many `tinker_lora_name`s are remembered (the oldest forgotten first).
MAX_TINKER_LORA_NAMES = 20_000


@dataclass
class StoredResponse:
    """What `GET /v1/responses/{id}` reports about one request."""

    id: str
    created_at: float
    request: SamplingRequest
    latency: float  # injected when it was created
    ready_at: float  # monotonic time before which it reports in_progress
    fault: str | None
    job: Job | None  # None when a fault ends it without sampling
    lane: str = ""  # whose quota it counts against
    body: dict[str, Any] | None = None  # the final body, once there is one

    def finished(self, now: float) -> bool:
        """Whether its final body is ready (sampled, or ended by a fault)."""
        sampled = self.job is None or self.job.done.done()
        return self.body is not None or (sampled and self.ready_at <= now)

    def envelope(self) -> dict[str, Any]:
        return wire.envelope(self.id, self.created_at, self.request.model, self.request.metadata)


class SailService:
    """State behind the routes: base model, vocabulary, adapters, responses, knobs."""

    def __init__(
        self,
        knobs: ClientKnobs,
        lanes: Lanes | None = None,
        expire_checkpoint: Callable[[str], None] = lambda url: None,
    ) -> None:
        # Every base model the stack serves, by name, with its vocabulary.
        served = {name: load_base_model(name) for name in BASE_MODEL_DIRS}
        self.base_models = {name: model for name, (model, _) in served.items()}
        self.vocabs = {name: vocab for name, (_, vocab) in served.items()}
        self.base_model, self.vocab = served[BASE_MODEL_NAME]
        self.tokenizer = offline_kimi_tokenizer()  # for the `text` field; slow to build
        self.knobs = knobs
        self.lanes = lanes or Lanes()  # which clients share turns and quotas
        self.fault_rng = random.Random(knobs.default.seed)
        self.batcher = Batcher(torch.Generator().manual_seed(knobs.default.seed))
        self.adapters = AdapterCache()
        self.files = FileStore()
        self.loras = LoraRegistry(self.files, tuple(BASE_MODEL_DIRS))
        self.responses: dict[str, StoredResponse] = {}
        self._held: dict[str, dict[str, StoredResponse]] = {}  # by lane, oldest first
        self.lora_names = TinkerLoraNames()
        self.faults_injected: Counter[str] = Counter()
        # Expires the Tinker checkpoint behind an archive URL (the `checkpoint_expired` fault).
        self.expire_checkpoint = expire_checkpoint
        knobs.default.on_reseed(self.reseed)

    def reseed(self, seed: int) -> None:
        """Restart the fault draws and the sampler's random stream."""
        self.fault_rng.seed(seed)
        self.batcher.generator.manual_seed(seed)

    def stats(self) -> dict[str, int | dict[str, int]]:
        return {
            **self.batcher.stats,
            "tinker_lora_names_reused": self.lora_names.reused,
            "faults_injected": dict(self.faults_injected),
        }

    async def close(self) -> None:
        await self.loras.close()
        await self.batcher.close()

    async def create(self, request: SamplingRequest, client: str = "") -> StoredResponse:
        """Accept a checked request from `client`: load its adapter, queue it for decoding
        under the client's own latency and faults (clients' lanes, `local_stack.lanes`, take
        turns on the compute thread).

        Injected latency counts from the request's arrival, so loading the adapter, like
        decoding, happens inside it rather than adding to it.
        """
        knobs, lane = self.knobs.of(client), self.lanes.of(client)
        arrived, latency = time.monotonic(), knobs.latency
        fault = knobs.draw_fault(self.fault_rng)
        if fault is not None:
            self.faults_injected[fault] += 1
        if fault == "timeout":
            await asyncio.sleep(TIMEOUT_FAULT_HOLD_SECONDS)
        if fault in REFUSING_FAULTS:
            raise REFUSING_FAULTS[fault]
        model_key, model = f"base:{request.model}", self.base_models[request.model]
        vocab = self.vocabs[request.model]
        if request.lora is not None:
            if fault == "checkpoint_expired" and isinstance(request.lora, LoraSource):
                self.expire_checkpoint(request.lora.source)
            adapter = await self._adapter(request.lora, request, lane)
            if isinstance(request.lora, LoraSource) and request.lora.name is not None:
                self.lora_names.record(client, request.lora.name, adapter.digest)
            trained_on = adapter.config.get("base_model_name_or_path", request.model)
            if trained_on != request.model:
                raise ApiError(
                    f"the LoRA was trained on {str(trained_on)[:80]!r}, not on the requested "
                    f"model {request.model!r}",
                    param="metadata.lora",
                )
            # Keyed by the model itself: queued jobs hold it, so its id cannot be reused by
            # another adapter while they wait (an evicted or deleted Adapter's could).
            model_key, model = f"lora:{id(adapter.model)}", adapter.model
        self._make_room(lane)
        job = None
        if fault not in ENDING_FAULTS:
            done = asyncio.get_running_loop().create_future()
            job = Job(
                vocab.to_compact(request.prompt), request.params, model_key, model, done, lane
            )
            self.batcher.submit(job)
        self._forget_old_responses()
        stored = StoredResponse(
            id=f"resp_{uuid.uuid4().hex}",
            created_at=time.time(),
            request=request,
            latency=latency,
            ready_at=arrived + latency,
            fault=fault,
            job=job,
            lane=lane,
        )
        self.responses[stored.id] = stored
        self._held.setdefault(lane, {})[stored.id] = stored
        return stored

    def _make_room(self, lane: str) -> None:
        """Room for one more of `lane`'s responses: at its cap, its oldest finished one is
        forgotten; if none has finished, a 429 says so."""
        held = self._held.get(lane, {})
        if len(held) < MAX_RESPONSES_PER_CLIENT:
            return
        now = time.monotonic()
        oldest_finished = next((r for r in held.values() if r.finished(now)), None)
        if oldest_finished is None:
            whose = "your" if lane != SHARED_LANE else "unregistered keys' (they share one quota)"
            raise ApiError(
                f"{MAX_RESPONSES_PER_CLIENT} of {whose} responses are still in progress, the "
                "most one client may have; wait for some to finish before creating more",
                status=429,
            )
        self._forget(oldest_finished)

    def _forget(self, stored: StoredResponse) -> None:
        del self.responses[stored.id]
        held = self._held[stored.lane]
        del held[stored.id]
        if not held:
            del self._held[stored.lane]

    def forget_client(self, client: str) -> None:
        """Release what `client`, which has left the stack, held: its LoRAs, files and
        stored responses (a queued one still decodes, and its result is dropped)."""
        self.loras.forget(client)
        self.files.forget(client)
        for stored in [r for r in self.responses.values() if r.request.client == client]:
            self._forget(stored)

    def has_pending_work(self) -> bool:
        """Whether a response is still queued, decoding, or inside its injected latency."""
        now = time.monotonic()
        return any(
            stored.body is None
            and (stored.ready_at > now or (stored.job is not None and not stored.job.done.done()))
            for stored in self.responses.values()
        )

    def find(self, response_id: str) -> StoredResponse | None:
        return self.responses.get(response_id)

    def queued_body(self, stored: StoredResponse) -> dict[str, Any]:
        return wire.pending(stored.envelope(), "queued")

    async def _adapter(
        self, lora: LoraSource | NamedLora, request: SamplingRequest, lane: str
    ) -> Adapter:
        """`request`'s LoRA: an uploaded one by name or id, or a Tinker archive by URL (fetched
        and loaded in `lane`'s download slots and turns)."""
        if isinstance(lora, NamedLora):
            return self.loras.adapter_for(request.client, lora.name_or_id, request.model)
        return await self.adapters.get(lora, lane)

    async def wait(self, stored: StoredResponse) -> dict[str, Any]:
        """The response's current body; waits up to LONG_POLL_SECONDS for it to finish.

        Under injected latency it answers at once, `in_progress` until the latency is over,
        as the real service does when a response takes a while.
        """
        if stored.body is not None:
            return stored.body
        if stored.ready_at > time.monotonic():
            return wire.pending(stored.envelope(), "in_progress")
        if stored.job is not None:
            if stored.latency == 0:
                await asyncio.wait({stored.job.done}, timeout=LONG_POLL_SECONDS)
            if not stored.job.done.done():
                return wire.pending(stored.envelope(), "in_progress")
        stored.body = self._final_body(stored)
        return stored.body

    async def wait_until_done(self, stored: StoredResponse) -> dict[str, Any]:
        """The final body, however long it takes (a foreground create)."""
        while (body := await self.wait(stored))["status"] == "in_progress":
            await asyncio.sleep(FOREGROUND_POLL_SECONDS)
        return body

    def _final_body(self, stored: StoredResponse) -> dict[str, Any]:
        base = stored.envelope()
        if stored.fault in ENDING_FAULTS:
            message = f"injected fault: the response {stored.fault}"
            return wire.ended_without_output(
                base, stored.fault, ENDING_FAULTS[stored.fault], message
            )
        assert stored.job is not None  # only a fault ends a response without sampling
        error = stored.job.done.exception()
        if error is not None:
            return wire.ended_without_output(
                base, "failed", "server_error", f"sampling failed: {error}"
            )
        completion = stored.job.done.result()
        token_ids = self.vocabs[stored.request.model].to_real(completion.tokens)
        return wire.finished(
            base,
            text=self.tokenizer.decode(token_ids),
            token_ids=token_ids,
            logprobs=completion.logprobs if stored.request.include_logprobs else None,
            stop_reason=completion.stop_reason,
            input_tokens=len(stored.request.prompt),
        )

    def _forget_old_responses(self) -> None:
        cutoff = time.time() - RESPONSE_TTL_SECONDS
        while self.responses:
            oldest = next(iter(self.responses.values()))
            if oldest.created_at > cutoff and len(self.responses) < MAX_STORED_RESPONSES:
                break
            self._forget(oldest)


class TinkerLoraNames:
    """The `tinker_lora_name` each client sent, and the adapter it named.

    sail 0.17.1 documents the field only as an optional name sent with a Tinker LoRA's signed
    URL; what the real service does with it (a cache key? unique per organisation, like an
    uploaded LoRA's name?) is not documented. So the local Sail serves by URL, as before, and
    only records each name: a name sent again for different adapter bytes is counted
    (`reused`, in the control plane's stats) and logged, so a collision shows locally.
    """

    def __init__(self, most: int = MAX_TINKER_LORA_NAMES) -> None:
        self.most = most
        self.named: OrderedDict[tuple[str, str], str] = OrderedDict()
        self.reused = 0

    def record(self, client: str, name: str, digest: str) -> None:
        key = (client, name)
        before = self.named.pop(key, None)
        if before is not None and before != digest:
            self.reused += 1
            print(
                f"sail: client {client} sent tinker_lora_name {name[:80]!r} for another "
                "adapter than before",
                file=sys.stderr,
                flush=True,
            )
        self.named[key] = digest
        while len(self.named) > self.most:
            self.named.popitem(last=False)
