"""Tinker's asynchronous results: futures the SDK polls, and the per-model request order.

Training requests answer at once with a request id; their work runs later, in the model's
`seq_id` order, on the compute thread shared with sampling. The result (or the failure)
waits in a `Future` until the SDK's `retrieve_future` collects it.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass, field

from local_stack.engine.checkpoints import CheckpointNotFound
from local_stack.engine.compute import run_compute, run_compute_sliced

logger = logging.getLogger(__name__)

# A seq_id the client numbered but never sent (it failed client-side) stalls its model's
# queue this long before the queue moves on.
SEQ_GAP_SECONDS = 5.0
# How far past a model's last seq_id a request may be. The SDK numbers requests one by one
# (a forward_backward's chunks take consecutive ids), so only a broken or hostile client
# gets near this; past it, the gap would stall the queue and then skip the real requests.
MAX_SEQ_AHEAD = 1000


@dataclass(frozen=True)
class Sliced:
    """A long job as a generator, run on the compute thread one slice (`yield`) at a time,
    so other clients' work runs in between (`run_compute_sliced`)."""

    start: Callable[[], Generator[None, None, object]]


# A job's result: whatever the service computes (the routes encode it for the wire).
Job = Callable[[], object] | Sliced


@dataclass
class Future:
    """A request's eventual result: what its job returned, or `{error, category}`."""

    owner: str  # the client whose request it answers; no other client can retrieve it
    done: asyncio.Event = field(default_factory=asyncio.Event)
    payload: object = None
    finished_at: float = 0.0

    def resolve(self, payload: object) -> None:
        self.payload = payload
        self.finished_at = time.monotonic()
        self.done.set()

    async def complete_with(self, job: Job, client: str, not_before: float = 0.0) -> None:
        """Run `job` on the compute thread, in `client`'s turns, and resolve with its result
        or its failure.

        A ValueError or a missing checkpoint is the request's fault ("user" category, which
        the SDK raises as RequestFailedError without retrying); anything else is ours.
        If the job finishes before the monotonic time `not_before`, the result waits until
        then: an asyncio sleep, so the compute thread is free for other work meanwhile.
        """
        try:
            if isinstance(job, Sliced):
                payload = await run_compute_sliced(job.start(), client=client)
            else:
                payload = await run_compute(job, client=client)
        except (ValueError, CheckpointNotFound) as e:
            payload = {"error": str(e), "category": "user"}
        except Exception as e:
            logger.exception("Tinker request failed")
            payload = {"error": f"{type(e).__name__}: {e}", "category": "server"}
        await asyncio.sleep(max(0.0, not_before - time.monotonic()))
        self.resolve(payload)


class FutureTable:
    """Futures by request id, forgotten some time after they finished."""

    def __init__(self) -> None:
        self._futures: dict[str, Future] = {}

    def new(self, owner: str) -> tuple[str, Future]:
        request_id = uuid.uuid4().hex
        self._futures[request_id] = future = Future(owner)
        return request_id, future

    def get(self, request_id: str) -> Future | None:
        return self._futures.get(request_id)

    def has_pending(self) -> bool:
        return any(not future.done.is_set() for future in self._futures.values())

    def forget_owner(self, owner: str) -> None:
        """Drop every future of `owner`, a client that has left (a running job's result is
        then dropped)."""
        for request_id, future in list(self._futures.items()):
            if future.owner == owner:
                del self._futures[request_id]

    def forget_finished_before(self, cutoff: float) -> None:
        for request_id, future in list(self._futures.items()):
            if future.done.is_set() and future.finished_at < cutoff:
                del self._futures[request_id]


class RequestSequencer:
    """Runs one model's requests in `seq_id` order, one at a time, like Tinker does.

    The SDK sends a model's requests in order, except the chunks of one large
    forward_backward, which may overtake each other; the order here keeps results exact.
    """

    def __init__(self) -> None:
        self._next = 1
        self._queued: dict[int, Callable[[], Awaitable[None]] | None] = {}
        self._arrived = asyncio.Event()
        self._task: asyncio.Task | None = None

    def claim(self, seq_id: int | None) -> int:
        """The seq_id to run a new request at; ValueError if it was already used, or if it
        is so far past the last one that the gap would make the queue skip real requests."""
        last = max([self._next - 1, *self._queued])
        if seq_id is None:
            return last + 1
        if seq_id < self._next or seq_id in self._queued:
            raise ValueError(f"seq_id {seq_id} was already used for this model")
        if seq_id > last + MAX_SEQ_AHEAD:
            raise ValueError(
                f"seq_id {seq_id} is too far ahead: this model's last seq_id is {last}, "
                f"and a request may be at most {MAX_SEQ_AHEAD} past it"
            )
        return seq_id

    def submit(self, seq_id: int, job: Callable[[], Awaitable[None]] | None) -> None:
        """Queue `job` (None: nothing to run, the request was rejected) at `seq_id`."""
        self._queued[seq_id] = job
        self._arrived.set()
        if self._task is None:
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            self._arrived.clear()
            if self._next in self._queued:
                job = self._queued.pop(self._next)
                self._next += 1
                if job is not None:
                    await job()
                continue
            if not self._queued:
                await self._arrived.wait()
                continue
            try:
                await asyncio.wait_for(self._arrived.wait(), SEQ_GAP_SECONDS)
            except TimeoutError:
                self._next = min(self._queued)

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
