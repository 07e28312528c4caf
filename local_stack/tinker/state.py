"""What the local Tinker service holds for its clients, and who may see or change it.

Sessions (ServiceClient's heartbeats), the live training runs, the futures the SDK polls
(`retrieve_future`) and the checkpoints RestClient manages, each with its owner; the sweep
that forgets old results and expired checkpoints; and the release of what a departed client
held. The training work itself (queueing, quotas, what each request computes) is
`local_stack.tinker.service`, built on this. It knows nothing of HTTP: methods raise
`UnknownId`, `SessionFinished` or `CheckpointNotFound`, which the routes answer as 404, 410
and 404.

Ownership. Every session, training run and future belongs to the client whose key created
it (`local_stack.config`); to any other client it does not exist (404, the same answer as
for an id never issued, so ids do not leak). A checkpoint belongs to the client whose run
saved it, and only that client may delete it or change its TTL: tinker's RestClient
documents a 404 for a TTL change by a user who does not own the run.

What is shared on purpose, and why. In the cloud every kernel of one user holds the same
key; here each kernel is a client of its own, yet the course reads checkpoints across
kernels: notebook 04, restarted after a crash, resumes from the state its dead kernel saved,
and notebook 09 ships the adapter notebook 04's kernel trained. So READING a checkpoint,
given its `tinker://` path, is open to every client: loading it into a new run of its own,
its `weights_info`, its archive URL (and so sampling from it on Sail). A run resumed from a
state checkpoint (weights and optimizer) continues the dead kernel's run, so its client may
also delete or re-TTL that one checkpoint, as notebook 04 does once its next state is
saved. Nothing else of another client's can be changed: no client can step, save into,
load into or read the info of another's run.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path

from local_stack.control.knobs import ClientKnobs
from local_stack.engine.checkpoints import (
    CheckpointNotFound,
    CheckpointRef,
    CheckpointStore,
    RunInfo,
)
from local_stack.engine.model import BASE_MODEL_DIRS, MAX_CONTEXT_TOKENS
from local_stack.engine.trainer import LoraTrainer
from local_stack.lanes import Lanes
from local_stack.tinker.futures import FutureTable, RequestSequencer

FUTURE_RETENTION_SECONDS = 3600.0
SWEEP_SECONDS = 60.0
# Nominal lifetime of an archive URL for a checkpoint without a TTL.
ARCHIVE_URL_SECONDS = 24 * 3600


class UnknownId(LookupError):
    """No such session, model or request id."""


class SessionFinished(Exception):
    """The session was finished; it takes no more heartbeats."""


@dataclass
class Session:
    owner: str  # the client that created it
    finished: bool = False


@dataclass
class TrainingModel:
    """A live training run: its trainer, its request queue, and when its current step began."""

    model_id: str
    owner: str  # the client that created it
    info: RunInfo
    trainer: LoraTrainer
    sequencer: RequestSequencer = field(default_factory=RequestSequencer)
    # seq_id -> (the request body's digest, its request id): the SDK re-sends a request
    # that timed out with the same seq_id, and that retry must get the same future.
    answered: OrderedDict[int, tuple[str, str]] = field(default_factory=OrderedDict)
    step_started_at: float | None = None  # when the queue reached the step's first request
    # The state checkpoint this run resumed from (weights and optimizer), once loaded.
    resumed_from: CheckpointRef | None = None


class TinkerState:
    """Sessions, live training runs, futures and the checkpoint store, each with its owner."""

    def __init__(self, store: CheckpointStore, knobs: ClientKnobs, lanes: Lanes) -> None:
        self.store = store
        self.knobs = knobs
        self.lanes = lanes
        self.sessions: dict[str, Session] = {}
        self.models: dict[str, TrainingModel] = {}
        self.futures = FutureTable()
        self._tasks: set[asyncio.Task] = set()

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        self._spawn(self._sweep_forever())

    def close(self) -> None:
        for model in self.models.values():
            model.sequencer.close()
        for task in self._tasks:
            task.cancel()

    def forget_client(self, client: str) -> None:
        """Release what `client`, which has left the stack, held in memory: its sessions,
        training runs (weights and optimizer state; their queued requests are dropped) and
        futures. Its checkpoints stay on disk: another client may resume from them."""
        for session_id in [s for s, session in self.sessions.items() if session.owner == client]:
            del self.sessions[session_id]
        for model in [m for m in self.models.values() if m.owner == client]:
            model.sequencer.close()
            del self.models[model.model_id]
        self.futures.forget_owner(client)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep_forever(self) -> None:
        """Delete expired checkpoints and forget old results, once a minute."""
        while True:
            self.store.delete_expired()
            self.futures.forget_finished_before(time.monotonic() - FUTURE_RETENTION_SECONDS)
            await asyncio.sleep(SWEEP_SECONDS)

    # -- sessions --------------------------------------------------------------------------

    def create_session(self, client: str) -> str:
        session_id = f"local-{secrets.token_hex(8)}"
        self.sessions[session_id] = Session(client)
        return session_id

    def heartbeat(self, session_id: str, client: str) -> None:
        if self._session(session_id, client).finished:
            raise SessionFinished(f"session {session_id!r:.80} has finished")

    def finish_session(self, session_id: str, client: str) -> None:
        self._session(session_id, client).finished = True

    def _session(self, session_id: str, client: str) -> Session:
        """The client's session; UnknownId if it has none by that id."""
        session = self.sessions.get(session_id)
        if session is None or session.owner != client:
            raise UnknownId(f"unknown session {session_id!r:.80}")
        return session

    @staticmethod
    def capabilities() -> list[dict]:
        # Sampling is Sail's job here: Tinker's own sampling endpoints are not served.
        return [
            {"model_name": name, "max_context_length": MAX_CONTEXT_TOKENS}
            | {"trainable": True, "sampleable": False}
            for name in BASE_MODEL_DIRS
        ]

    # -- training runs and their futures ---------------------------------------------------

    def _runs_of(self, lane: str) -> list[str]:
        """The model ids of the live runs whose owners take `lane` (also called on the compute
        thread, hence the copy: a run built meanwhile must not break the loop)."""
        return [m.model_id for m in list(self.models.values()) if self.lanes.of(m.owner) == lane]

    def model(self, model_id: str | None, client: str) -> TrainingModel:
        """The client's own model; another client's is as unknown as one never created."""
        model = None if model_id is None else self.models.get(model_id)
        if model is None or model.owner != client:
            raise UnknownId(f"unknown model_id {model_id!r:.80}: create a training client first")
        return model

    async def result(self, request_id: str, wait_seconds: float, client: str) -> object:
        """The result of the client's request (what its job returned, a `Result`, or an error
        dict), waiting up to `wait_seconds` for it (None: not yet)."""
        future = self.futures.get(request_id)
        if future is None or future.owner != client:
            raise UnknownId(f"unknown request_id {request_id!r:.80}")
        try:
            await asyncio.wait_for(future.done.wait(), wait_seconds)
        except TimeoutError:
            return None
        return future.payload

    # -- checkpoints (RestClient) ----------------------------------------------------------

    def checkpoint_run(self, ref: CheckpointRef) -> RunInfo:
        """How the run that saved `ref` was created (CheckpointNotFound if `ref` is gone)."""
        self.store.find(ref)
        return self.store.run_info(ref.model_id)

    def set_ttl(self, ref: CheckpointRef, ttl_seconds: int | None, client: str) -> None:
        self._check_may_change(ref, client)
        self.store.set_ttl(ref, ttl_seconds)

    def delete(self, ref: CheckpointRef, client: str) -> None:
        self._check_may_change(ref, client)
        self.store.delete(ref)

    def _check_may_change(self, ref: CheckpointRef, client: str) -> None:
        """Only the checkpoint's owner, or a client whose live run resumed from it, may
        delete it or set its TTL; to anyone else it is not found, in the same words."""
        self.store.find(ref)
        if self.store.owner(ref.model_id) == client:
            return
        if any(m.owner == client and m.resumed_from == ref for m in self.models.values()):
            return
        raise CheckpointNotFound(f"checkpoint {ref.tinker_path} not found")

    def archive_expiry(self, ref: CheckpointRef) -> float:
        """When an archive URL handed out now stops working (Unix seconds)."""
        return self.store.expires_at(ref) or time.time() + ARCHIVE_URL_SECONDS

    def archive(self, ref: CheckpointRef) -> Path:
        return self.store.archive(ref)

    def archive_latency(self, ref: CheckpointRef) -> float:
        """How long a download of `ref`'s archive waits first: its owner's knob (the
        stack's default for a run that records no owner)."""
        try:
            owner = self.store.owner(ref.model_id)
        except CheckpointNotFound:  # no run record: an archive put in place by hand
            owner = None
        return self.knobs.of(owner or "").archive_latency

    def expire_archive(self, url: str) -> None:
        """Let the checkpoint behind archive `url` expire now, as its TTL would (the control
        plane's `checkpoint_expired` fault); nothing if it is already gone."""
        model_id, kind, name = url.split("/")[-3:]
        try:
            self.store.set_ttl(CheckpointRef(model_id, kind, name.removesuffix(".tar")), 0)
        except (CheckpointNotFound, ValueError):
            pass
