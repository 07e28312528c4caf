"""The local Tinker service's training work: building runs, queueing their requests, quotas.

Built on `local_stack.tinker.state` (sessions, runs, futures and checkpoints, with the rules
on who owns what), it knows nothing of HTTP either: methods take parsed values
(`local_stack.tinker.requests`) and raise `UnknownId`, `SessionFinished`,
`CheckpointNotFound` or ValueError, which the routes answer as 404, 410, 404 and 400. Work
on a model is queued in its `seq_id` order and runs on the compute thread; its result waits
in a future (`local_stack.tinker.futures`). The control plane's `train_latency` knob makes
each training step take at least that long.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from tinker.types import AdamParams

from local_stack.control.knobs import ClientKnobs
from local_stack.engine.checkpoints import (
    CheckpointExists,
    CheckpointRef,
    CheckpointStore,
    RunInfo,
)
from local_stack.engine.model import adapter_config_for, load_base_model
from local_stack.engine.trainer import MODULE_GROUPS, ForwardBackwardResult, LoraTrainer
from local_stack.lanes import SHARED_LANE, Lanes
from local_stack.tinker.futures import Future, Job, Sliced
from local_stack.tinker.requests import ForwardBackward, Load, NewModel, Save
from local_stack.tinker.state import TinkerState, TrainingModel

# How many of a model's latest requests a retry can still find (the SDK retries at once).
RETRY_MEMORY = 64

# What a model's queued request computes: a JSON result, or forward_backward's tensors.
Result = dict | ForwardBackwardResult

# What one client may hold (made-up keys share one quota, `local_stack.lanes`). A notebook
# trains one or two runs and deletes each checkpoint once superseded, so it holds two or
# three; the caps leave room for a long sweep in one kernel, or a test session's hundreds of
# small runs. A run holds its adapter and Adam's moments in memory, in proportion to its
# LoRA rank (about 2.6 MB at rank 128, the largest), so its ranks are capped in all: 32 runs
# of rank 128, 128 of the course's rank 32; a checkpoint takes up to about 5.6 MB on disk.
MAX_TRAINING_RUNS = 256
MAX_TRAINING_RANKS = 4096
MAX_CHECKPOINTS = 512
MAX_CHECKPOINT_BYTES = 1024**3


@dataclass(frozen=True)
class StepPart:
    """A job that belongs to a training step: forward_backward calls, then the optim_step
    that ends the step. The `train_latency` knob times steps, not single requests."""

    job: Job
    ends_step: bool
    train_latency: float = 0.0  # the least the step takes: the submitting client's knob


class TinkerService(TinkerState):
    """Training runs built, their requests queued and run, within each client's quotas."""

    def __init__(self, store: CheckpointStore, knobs: ClientKnobs, lanes: Lanes) -> None:
        super().__init__(store, knobs, lanes)
        self._building: dict[str, tuple[str, int]] = {}  # model id -> (lane, rank), until built
        self._saves_queued: Counter[str] = Counter()  # by lane

    def has_pending_work(self) -> bool:
        """Whether a request is still queued or running (its future not resolved)."""
        return self.futures.has_pending() or bool(self._building)

    # -- training runs ---------------------------------------------------------------------

    def create_model(self, req: NewModel, client: str) -> tuple[str, str]:
        """Start building a model in the client's session; its future's request id and the
        model id."""
        self._session(req.session_id, client)
        model_id = f"{req.session_id}:train:{req.model_seq_id}"
        # Reserved until built, so two concurrent creates cannot both claim one model id.
        if model_id in self.models or model_id in self._building:
            raise ValueError(f"model_seq_id {req.model_seq_id} was already used in this session")
        lane = self.lanes.of(client)
        ranks = [rank for of_lane, rank in self._building.values() if of_lane == lane]
        ranks += [self.models[m].info.lora_rank for m in self._runs_of(lane)]
        if len(ranks) >= MAX_TRAINING_RUNS or sum(ranks) + req.info.lora_rank > MAX_TRAINING_RANKS:
            raise ValueError(
                f"{_holder(lane)} {len(ranks)} training clients of LoRA rank {sum(ranks)} in "
                f"all, and one client may hold {MAX_TRAINING_RUNS} of rank {MAX_TRAINING_RANKS} "
                "in all; train further with one of them rather than creating another"
            )
        self._building[model_id] = (lane, req.info.lora_rank)
        seed = req.seed if req.seed is not None else secrets.randbits(31)
        request_id, future = self.futures.new(client)

        def build() -> dict:
            trainer = _new_trainer(req.info, seed)
            if req.session_id not in self.sessions:  # its client left while it was built
                raise ValueError(f"session {req.session_id!r:.80} has ended")
            self.store.save_run_info(model_id, req.info, client)
            self.models[model_id] = TrainingModel(model_id, client, req.info, trainer)
            return {"type": "create_model", "model_id": model_id}

        async def create() -> None:
            try:
                await future.complete_with(build, lane)
            finally:
                self._building.pop(model_id, None)

        self._spawn(create())
        return request_id, model_id

    def submit(
        self,
        model_id: str | None,
        seq_id: int | None,
        digest: str,
        prepare: Callable[[TrainingModel], Job | StepPart],
        client: str,
    ) -> str:
        """Check a model request with `prepare` and queue the job it returns; the request id.

        A refused request still uses up its seq_id, so the requests after it do not wait.
        The same body sent again at the same seq_id is the SDK retrying after a timeout: it
        gets the first request's id, and nothing runs twice. The job computes in the turns of
        `client`'s lane (`local_stack.lanes`) on the compute thread, and a step takes at least
        the `train_latency` that `client`, who sends its optim_step, has set.
        """
        model = self.model(model_id, client)
        if seq_id is not None and seq_id in model.answered and model.answered[seq_id][0] == digest:
            return model.answered[seq_id][1]
        seq_id = model.sequencer.claim(seq_id)
        try:
            job = prepare(model)
            if isinstance(job, StepPart):
                job = replace(job, train_latency=self.knobs.of(client).train_latency)
        except Exception:
            model.sequencer.submit(seq_id, None)
            raise
        request_id, future = self.futures.new(client)
        lane = self.lanes.of(client)
        model.sequencer.submit(seq_id, functools.partial(self._run, model, future, job, lane))
        model.answered[seq_id] = (digest, request_id)
        while len(model.answered) > RETRY_MEMORY:
            model.answered.popitem(last=False)
        return request_id

    async def _run(
        self, model: TrainingModel, future: Future, job: Job | StepPart, lane: str
    ) -> None:
        """Run a queued job in `lane`'s turns. Under the `train_latency` knob, the optim_step
        that ends a step resolves no sooner than `train_latency` seconds after the queue
        reached the step's first request. Until then the model's queue waits, as behind a
        busy accelerator, but the compute thread does not: sampling runs meanwhile."""
        if not isinstance(job, StepPart):
            return await future.complete_with(job, lane)
        if model.step_started_at is None:
            model.step_started_at = time.monotonic()
        if not job.ends_step:
            return await future.complete_with(job.job, lane)
        started, model.step_started_at = model.step_started_at, None
        await future.complete_with(job.job, lane, not_before=started + job.train_latency)

    # -- what a model's requests do (each returns the job to queue) ------------------------

    def forward_backward(self, model: TrainingModel, req: ForwardBackward) -> Job | StepPart:
        # A chunk may hold a thousand datums: sliced by micro-batch, so that other clients'
        # sampling and training run in between rather than after all of it.
        job = Sliced(
            functools.partial(
                model.trainer.forward_backward_slices,
                req.data,
                req.loss_fn,
                backward=req.backward,
                config=req.config,
            )
        )
        return StepPart(job, ends_step=False) if req.backward else job  # forward-only: no step

    def optim_step(self, model: TrainingModel, hp: AdamParams) -> StepPart:
        return StepPart(lambda: {"metrics": model.trainer.optim_step(hp)}, ends_step=True)

    def save(self, model: TrainingModel, req: Save) -> Callable[[], Result]:
        """Refused at once when it can be: the name taken, or the owner's checkpoints (saved
        and queued) at their cap. The bytes are checked as written, on the compute thread,
        where saves run one at a time."""
        ref = CheckpointRef(model.model_id, req.kind, req.name)
        if not req.overwrite and self.store.exists(ref):
            raise CheckpointExists(f"{ref.tinker_path} already exists; pass overwrite=True")
        lane = self.lanes.of(model.owner)
        held, _ = self.store.usage(self._runs_of(lane))
        if held + self._saves_queued[lane] >= MAX_CHECKPOINTS:
            raise ValueError(
                f"{_holder(lane)} {held + self._saves_queued[lane]} checkpoints saved or "
                f"queued, the most one client may hold; delete some before saving more"
            )
        self._saves_queued[lane] += 1

        def save() -> dict:
            try:
                with self.store.staging_dir() as staging:
                    model.trainer.save(staging, with_optimizer=ref.kind == "weights")
                    self._check_disk_room(lane, staging)
                    # Checked again as written: a save queued meanwhile may have taken the name.
                    self.store.publish(ref, staging, req.ttl_seconds, overwrite=req.overwrite)
            finally:
                self._saves_queued[lane] -= 1
            kind = "save_weights" if ref.kind == "weights" else "save_weights_for_sampler"
            return {"type": kind, "path": ref.tinker_path}

        return save

    def _check_disk_room(self, lane: str, staging: Path) -> None:
        """ValueError unless `lane`'s checkpoints and the one in `staging` fit its disk cap."""
        _, used = self.store.usage(self._runs_of(lane))
        adding = sum(f.stat().st_size for f in staging.iterdir())
        if used + adding > MAX_CHECKPOINT_BYTES:
            raise ValueError(
                f"{_holder(lane)} {used / 2**20:.0f} MiB of checkpoints, and this one "
                f"({adding / 2**20:.1f} MiB) would pass the {MAX_CHECKPOINT_BYTES / 2**20:.0f} "
                "MiB one client may hold; delete some before saving more"
            )

    def load(self, model: TrainingModel, req: Load) -> Callable[[], Result]:
        """Load any client's checkpoint into this (the client's own) run: reading is shared."""
        self.store.find(req.ref)
        saved = self.store.run_info(req.ref.model_id)
        if saved.base_model != model.info.base_model:
            raise ValueError(
                f"{req.ref.tinker_path} was trained on {saved.base_model!r:.80}; this model is "
                f"{model.info.base_model!r:.80}"
            )
        if saved.lora_rank != model.info.lora_rank:
            raise ValueError(
                f"{req.ref.tinker_path} has LoRA rank {saved.lora_rank}; this model has rank "
                f"{model.info.lora_rank}"
            )

        def load() -> dict:
            model.trainer.load(self.store.find(req.ref), with_optimizer=req.with_optimizer)
            if req.with_optimizer:  # the run continues the one that saved this state
                model.resumed_from = req.ref
            return {"type": "load_weights", "path": req.ref.tinker_path, "model_id": model.model_id}

        return load


def _holder(lane: str) -> str:
    """Who holds a quota, as a refusal's sentence starts: "this client has", or all keys no
    process registered, which share one."""
    if lane == SHARED_LANE:
        return "clients whose keys no process registered (they share one quota) have"
    return "this client has"


def _new_trainer(info: RunInfo, seed: int) -> LoraTrainer:
    base_model, vocab = load_base_model(info.base_model)
    return LoraTrainer(
        base_model,
        vocab,
        adapter_config_for(info.lora_rank, info.base_model),
        seed=seed,
        trained_groups=[g for g in MODULE_GROUPS if getattr(info, g)],
    )
