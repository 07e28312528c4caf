"""The Sail service's state: the model, adapters, the batcher and the responses it answers.

Knows nothing of HTTP: it takes checked `SamplingRequest`s and hands back response bodies.
The knobs it is given (latency, faults, seed; owned by the control plane) decide when a
response may report done and whether it suffers an injected fault.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass
from typing import Any

import torch

from kimi import offline_kimi_tokenizer
from local_stack.control.knobs import ClientKnobs
from local_stack.engine.model import BASE_MODEL_DIRS, BASE_MODEL_NAME, load_base_model
from local_stack.http import ApiError
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
# Faults decided at creation that end a response without sampling it.
ENDING_FAULTS = {"failed": "server_error", "expired": "expired"}


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
    body: dict[str, Any] | None = None  # the final body, once there is one

    def envelope(self) -> dict[str, Any]:
        return wire.envelope(self.id, self.created_at, self.request.model, self.request.metadata)


class SailService:
    """State behind the routes: base model, vocabulary, adapters, responses, knobs."""

    def __init__(self, knobs: ClientKnobs) -> None:
        # Every base model the stack serves, by name, with its vocabulary.
        served = {name: load_base_model(name) for name in BASE_MODEL_DIRS}
        self.base_models = {name: model for name, (model, _) in served.items()}
        self.vocabs = {name: vocab for name, (_, vocab) in served.items()}
        self.base_model, self.vocab = served[BASE_MODEL_NAME]
        self.tokenizer = offline_kimi_tokenizer()  # for the `text` field; slow to build
        self.knobs = knobs
        self.fault_rng = random.Random(knobs.default.seed)
        self.batcher = Batcher(torch.Generator().manual_seed(knobs.default.seed))
        self.adapters = AdapterCache()
        self.files = FileStore()
        self.loras = LoraRegistry(self.files, tuple(BASE_MODEL_DIRS))
        self.responses: dict[str, StoredResponse] = {}
        knobs.default.on_reseed(self.reseed)

    def reseed(self, seed: int) -> None:
        """Restart the fault draws and the sampler's random stream."""
        self.fault_rng.seed(seed)
        self.batcher.generator.manual_seed(seed)

    def stats(self) -> dict[str, int]:
        return dict(self.batcher.stats)

    async def close(self) -> None:
        await self.loras.close()
        await self.batcher.close()

    async def create(self, request: SamplingRequest, client: str = "") -> StoredResponse:
        """Accept a checked request from `client`: load its adapter, queue it for decoding
        under the client's own latency and faults (clients' requests take turns on the
        compute thread).

        Injected latency counts from the request's arrival, so loading the adapter, like
        decoding, happens inside it rather than adding to it.
        """
        knobs = self.knobs.of(client)
        arrived, latency = time.monotonic(), knobs.latency
        model_key, model = f"base:{request.model}", self.base_models[request.model]
        vocab = self.vocabs[request.model]
        if request.lora is not None:
            adapter = await self._adapter(request.lora, request, client)
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
        fault = knobs.draw_fault(self.fault_rng)
        job = None
        if fault not in ENDING_FAULTS:
            done = asyncio.get_running_loop().create_future()
            job = Job(
                vocab.to_compact(request.prompt), request.params, model_key, model, done, client
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
        )
        self.responses[stored.id] = stored
        return stored

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
        self, lora: LoraSource | NamedLora, request: SamplingRequest, client: str
    ) -> Adapter:
        """`request`'s LoRA: an uploaded one by name or id, or a Tinker archive by URL."""
        if isinstance(lora, NamedLora):
            return self.loras.adapter_for(request.client, lora.name_or_id, request.model)
        return await self.adapters.get(lora, client)

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
            del self.responses[oldest.id]
