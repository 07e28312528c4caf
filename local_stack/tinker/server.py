"""The loopback Tinker service: what tinker 0.35's ServiceClient, TrainingClient and RestClient
call on the course's path, backed by real LoRA training of the tiny model.

The wire contract, as the SDK's source defines it:
- Every `/api/v1` request carries `X-API-Key`; only `TINKER_API_KEY` is accepted (401 else).
- Training requests answer a future, `{request_id, model_id}`, and the SDK then polls
  `/api/v1/retrieve_future`. Polls are held open until the result exists (long polling),
  so a result reaches the client as soon as it is computed, without busy polling.
- `forward_backward` arrives as protobuf and its result leaves as protobuf (`tinker/proto`).
- A model's requests run in `seq_id` order (the SDK numbers them from 1 per client), one at
  a time, on the compute thread shared with sampling.
- Errors: input that cannot work answers 4xx with a JSON body when submitted, which the SDK
  raises at once (BadRequestError, NotFoundError, AuthenticationError). The SDK retries 408,
  409, 429, 5xx and bodiless 400s for minutes, so none of those is used for an error a retry
  cannot fix. A failure while computing becomes a failed future: RequestFailedError.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from aiohttp import web
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from local_stack.config import TINKER_API_KEY
from local_stack.engine.checkpoints import (
    CheckpointNotFound,
    CheckpointRef,
    CheckpointStore,
    RunInfo,
    check_ttl,
)
from local_stack.engine.compute import run_compute
from local_stack.engine.model import (
    BASE_MODEL_NAME,
    MAX_CONTEXT_TOKENS,
    adapter_config_for,
    load_base_model,
)
from local_stack.engine.trainer import (
    LOSS_FNS,
    MODULE_GROUPS,
    ForwardBackwardResult,
    LoraTrainer,
    MalformedDatum,
    TrainingDatum,
    check_datum,
)

logger = logging.getLogger(__name__)

ARCHIVE_ROUTE = "/tinker/archives"
MAX_LORA_RANK = 128
# Held-open polls answer `try_again` after this long; the SDK's poll timeout is 45 s.
LONG_POLL_SECONDS = 20.0
# A seq_id the client numbered but never sent (it failed client-side) stalls its model's
# queue this long before the queue moves on.
SEQ_GAP_SECONDS = 5.0
FUTURE_RETENTION_SECONDS = 3600.0
SWEEP_SECONDS = 60.0
# Nominal lifetime of an archive URL for a checkpoint without a TTL.
ARCHIVE_URL_SECONDS = 24 * 3600


class ApiError(Exception):
    """An error answered with `status` and a JSON body the SDK shows in its exception."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"detail": message}, status=status)


def _api(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]):
    """Check the API key and turn exceptions into the 4xx answers the SDK raises at once.

    Even a bug here answers 400, not 500: the SDK would retry a 500 for five minutes.
    """

    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        if request.headers.get("X-API-Key") != TINKER_API_KEY:
            return _error(
                401, f"invalid Tinker API key: the local stack accepts {TINKER_API_KEY!r}"
            )
        try:
            return await handler(request)
        except ApiError as e:
            return _error(e.status, str(e))
        except CheckpointNotFound as e:
            return _error(404, str(e))
        except ValueError as e:  # includes pydantic's ValidationError and MalformedDatum
            return _error(400, str(e))
        except Exception as e:
            logger.exception("local Tinker server error")
            return _error(400, f"local Tinker server error: {type(e).__name__}: {e}")

    return wrapped


@dataclass
class Future:
    """A request's eventual result: a JSON dict, protobuf bytes, or `{error, category}`."""

    done: asyncio.Event = field(default_factory=asyncio.Event)
    payload: dict | bytes | None = None
    finished_at: float = 0.0

    def resolve(self, payload: dict | bytes) -> None:
        self.payload = payload
        self.finished_at = time.monotonic()
        self.done.set()

    async def complete_with(self, compute: Callable[[], dict | bytes]) -> None:
        """Run `compute` on the compute thread and resolve with its result or its failure."""
        try:
            self.resolve(await run_compute(compute))
        except (ValueError, CheckpointNotFound) as e:
            self.resolve({"error": str(e), "category": "user"})
        except Exception as e:
            logger.exception("Tinker request failed")
            self.resolve({"error": f"{type(e).__name__}: {e}", "category": "server"})


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
        """The seq_id to run a new request at; ValueError if it was already used."""
        if seq_id is None:
            return max([self._next - 1, *self._queued]) + 1
        if seq_id < self._next or seq_id in self._queued:
            raise ValueError(f"seq_id {seq_id} was already used for this model")
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


@dataclass
class TrainingModel:
    """A live training run: its trainer and its request queue."""

    model_id: str
    info: RunInfo
    trainer: LoraTrainer
    sequencer: RequestSequencer = field(default_factory=RequestSequencer)


class TinkerService:
    """State and handlers of the local Tinker service."""

    def __init__(self, store: CheckpointStore, public_url: str) -> None:
        self.store = store
        self.public_url = public_url.rstrip("/")
        self.sessions: dict[str, bool] = {}  # session id -> finished
        self.models: dict[str, TrainingModel] = {}
        self.futures: dict[str, Future] = {}
        self._tasks: set[asyncio.Task] = set()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, app: web.Application) -> None:
        self._spawn(self._sweep_forever())

    async def stop(self, app: web.Application) -> None:
        for model in self.models.values():
            model.sequencer.close()
        for task in self._tasks:
            task.cancel()

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sweep_forever(self) -> None:
        """Delete expired checkpoints and forget old results, once a minute."""
        while True:
            self.store.delete_expired()
            cutoff = time.monotonic() - FUTURE_RETENTION_SECONDS
            for request_id, future in list(self.futures.items()):
                if future.done.is_set() and future.finished_at < cutoff:
                    del self.futures[request_id]
            await asyncio.sleep(SWEEP_SECONDS)

    def _new_future(self) -> tuple[str, Future]:
        request_id = uuid.uuid4().hex
        self.futures[request_id] = future = Future()
        return request_id, future

    def _model(self, model_id: str | None) -> TrainingModel:
        if model_id not in self.models:
            raise ApiError(404, f"unknown model_id {model_id!r}: create a training client first")
        return self.models[model_id]

    # -- client setup and sessions ---------------------------------------------------------

    async def client_config(self, request: web.Request) -> web.Response:
        # No JWT exchange, plain httpx transport, uncompressed forward_backward bodies.
        return web.json_response({"pjwt_auth_enabled": False, "use_pyqwest_transport": False})

    async def client_dynamic_config(self, request: web.Request) -> web.Response:
        return web.json_response({})

    async def create_session(self, request: web.Request) -> web.Response:
        types.CreateSessionRequest.model_validate(await request.json())
        session_id = f"local-{uuid.uuid4().hex[:16]}"
        self.sessions[session_id] = False
        return web.json_response({"type": "create_session", "session_id": session_id})

    async def session_heartbeat(self, request: web.Request) -> web.Response:
        session_id = types.SessionHeartbeatRequest.model_validate(await request.json()).session_id
        if session_id not in self.sessions:
            raise ApiError(404, f"unknown session {session_id!r}")
        if self.sessions[session_id]:
            raise ApiError(410, f"session {session_id!r} has finished")
        return web.json_response({"type": "session_heartbeat"})

    async def finish_session(self, request: web.Request) -> web.Response:
        session_id = request.match_info["session_id"]
        if session_id not in self.sessions:
            raise ApiError(404, f"unknown session {session_id!r}")
        self.sessions[session_id] = True
        return web.json_response({})

    async def telemetry(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "accepted"})

    async def server_capabilities(self, request: web.Request) -> web.Response:
        model = {"model_name": BASE_MODEL_NAME, "max_context_length": MAX_CONTEXT_TOKENS}
        # Sampling is Sail's job here: Tinker's own sampling endpoints are not served.
        model |= {"trainable": True, "sampleable": False}
        return web.json_response({"supported_models": [model]})

    # -- training runs -----------------------------------------------------------------

    async def create_model(self, request: web.Request) -> web.Response:
        req = types.CreateModelRequest.model_validate(await request.json())
        if req.session_id not in self.sessions:
            raise ApiError(404, f"unknown session {req.session_id!r}")
        if req.base_model != BASE_MODEL_NAME:
            raise ValueError(
                f"base model {req.base_model!r} is not served by the local stack; "
                f"use {BASE_MODEL_NAME!r}"
            )
        lora = req.lora_config
        if lora is None:
            raise ValueError("the local stack trains LoRA adapters only: pass a lora_config")
        if not 1 <= lora.rank <= MAX_LORA_RANK:
            raise ValueError(f"LoRA rank must be between 1 and {MAX_LORA_RANK}; got {lora.rank}")
        if req.optimizer_config.type != "adamw":
            raise ValueError(f"optimizer {req.optimizer_config.type!r} is not available; use Adam")
        model_id = f"{req.session_id}:train:{req.model_seq_id}"
        if model_id in self.models:
            raise ValueError(f"model_seq_id {req.model_seq_id} was already used in this session")
        info = RunInfo(
            BASE_MODEL_NAME, lora.rank, lora.train_unembed, lora.train_mlp, lora.train_attn
        )
        seed = lora.seed if lora.seed is not None else secrets.randbits(31)
        request_id, future = self._new_future()

        def build() -> dict:
            trainer = _new_trainer(info, seed)
            self.store.save_run_info(model_id, info)
            self.models[model_id] = TrainingModel(model_id, info, trainer)
            return {"type": "create_model", "model_id": model_id}

        self._spawn(future.complete_with(build))
        return web.json_response({"request_id": request_id, "model_id": model_id})

    async def get_info(self, request: web.Request) -> web.Response:
        model = self._model(types.GetInfoRequest.model_validate(await request.json()).model_id)
        model_data = {
            "arch": "llama",
            "model_name": BASE_MODEL_NAME,
            "tokenizer_id": BASE_MODEL_NAME,
        }
        return web.json_response(
            {
                "type": "get_info",
                "model_id": model.model_id,
                "model_name": BASE_MODEL_NAME,
                "model_data": model_data,
                "is_lora": True,
                "lora_rank": model.info.lora_rank,
            }
        )

    async def _enqueue(
        self,
        model_id: str | None,
        seq_id: int | None,
        prepare: Callable[[TrainingModel], Callable[[], dict | bytes]],
    ) -> web.Response:
        """Validate a model request with `prepare`, queue what it returns, answer a future.

        A rejected request still uses up its seq_id, so the requests after it do not wait.
        """
        model = self._model(model_id)
        seq_id = model.sequencer.claim(seq_id)
        try:
            compute = prepare(model)
        except Exception:
            model.sequencer.submit(seq_id, None)
            raise
        request_id, future = self._new_future()
        model.sequencer.submit(seq_id, functools.partial(future.complete_with, compute))
        return web.json_response({"request_id": request_id, "model_id": model.model_id})

    async def forward_backward(self, request: web.Request) -> web.Response:
        msg = pb.ForwardBackwardRequest()
        try:
            msg.ParseFromString(await request.read())
        except Exception as e:
            raise ValueError(f"forward_backward body is not a ForwardBackwardRequest: {e}") from e

        def prepare(model: TrainingModel) -> Callable[[], bytes]:
            if msg.loss_fn not in LOSS_FNS:
                available = ", ".join(sorted(LOSS_FNS))
                raise ValueError(f"loss_fn {msg.loss_fn!r} is not available locally: {available}")
            if msg.loss_fn_config or msg.loss_fn_config_v2:
                raise ValueError(f"{msg.loss_fn} takes no loss_fn_config")
            data = [_datum_from_proto(d) for d in msg.data]
            if not data:
                raise ValueError("forward_backward needs at least one datum")
            for i, datum in enumerate(data):
                try:
                    check_datum(datum, msg.loss_fn, MAX_CONTEXT_TOKENS)
                except MalformedDatum as e:
                    raise MalformedDatum(f"datum {i}: {e}") from e
            backward = not msg.forward_only
            return lambda: _forward_backward_output(
                model.trainer.forward_backward(data, msg.loss_fn, backward=backward)
            )

        return await self._enqueue(msg.model_id, msg.seq_id, prepare)

    async def optim_step(self, request: web.Request) -> web.Response:
        req = types.OptimStepRequest.model_validate(await request.json())

        def prepare(model: TrainingModel) -> Callable[[], dict]:
            hp = req.optim_params
            if not isinstance(hp, types.AdamParams):
                raise ValueError("the local stack's optimizer is Adam: pass AdamParams")
            if not (hp.learning_rate >= 0 and 0 <= hp.beta1 < 1 and 0 <= hp.beta2 < 1):
                raise ValueError("Adam needs learning_rate >= 0 and betas in [0, 1)")
            if not (hp.eps > 0 and hp.weight_decay >= 0 and hp.grad_clip_norm >= 0):
                raise ValueError("Adam needs eps > 0, weight_decay >= 0, grad_clip_norm >= 0")
            return lambda: {"metrics": model.trainer.optim_step(hp)}

        return await self._enqueue(req.model_id, req.seq_id, prepare)

    async def save_weights_for_sampler(self, request: web.Request) -> web.Response:
        req = types.SaveWeightsForSamplerRequest.model_validate(await request.json())

        def prepare(model: TrainingModel) -> Callable[[], dict]:
            if req.path is None:
                raise ValueError(
                    "pass a name: the local stack samples through Sail, not sampling sessions"
                )
            ref = CheckpointRef(model.model_id, "sampler_weights", req.path)
            check_ttl(req.ttl_seconds)
            return functools.partial(
                self._save, model, ref, req.ttl_seconds, "save_weights_for_sampler"
            )

        return await self._enqueue(req.model_id, req.seq_id, prepare)

    async def save_weights(self, request: web.Request) -> web.Response:
        req = types.SaveWeightsRequest.model_validate(await request.json())

        def prepare(model: TrainingModel) -> Callable[[], dict]:
            ref = CheckpointRef(model.model_id, "weights", req.path or "")
            check_ttl(req.ttl_seconds)
            if not req.overwrite and self.store.exists(ref):
                raise ValueError(f"{ref.tinker_path} already exists; pass overwrite=True")
            return functools.partial(self._save, model, ref, req.ttl_seconds, "save_weights")

        return await self._enqueue(req.model_id, req.seq_id, prepare)

    def _save(self, model: TrainingModel, ref: CheckpointRef, ttl: int | None, kind: str) -> dict:
        staging = self.store.staging_dir()
        model.trainer.save(staging, with_optimizer=ref.kind == "weights")
        self.store.publish(ref, staging, ttl)
        return {"type": kind, "path": ref.tinker_path}

    async def load_weights(self, request: web.Request) -> web.Response:
        req = types.LoadWeightsRequest.model_validate(await request.json())

        def prepare(model: TrainingModel) -> Callable[[], dict]:
            ref = CheckpointRef.from_tinker_path(req.path)
            if ref.kind != "weights":
                raise ValueError(f"load_state takes a save_state path (…/weights/…): {req.path}")
            self.store.find(ref)
            saved = self.store.run_info(ref.model_id)
            if saved.lora_rank != model.info.lora_rank:
                raise ValueError(
                    f"{req.path} has LoRA rank {saved.lora_rank}; this model has rank "
                    f"{model.info.lora_rank}"
                )

            def load() -> dict:
                model.trainer.load(self.store.find(ref), with_optimizer=req.optimizer)
                return {"type": "load_weights", "path": req.path, "model_id": model.model_id}

            return load

        return await self._enqueue(req.model_id, req.seq_id, prepare)

    async def retrieve_future(self, request: web.Request) -> web.Response:
        request_id = types.FutureRetrieveRequest.model_validate(await request.json()).request_id
        future = self.futures.get(request_id)
        if future is None:
            raise ApiError(404, f"unknown request_id {request_id!r}")
        try:
            await asyncio.wait_for(future.done.wait(), LONG_POLL_SECONDS)
        except TimeoutError:
            return web.json_response(
                {"type": "try_again", "request_id": request_id, "queue_state": "active"}
            )
        if isinstance(future.payload, bytes):
            return web.Response(body=future.payload, content_type="application/x-protobuf")
        return web.json_response(future.payload)

    # -- checkpoints (RestClient) --------------------------------------------------------

    def _ref(self, request: web.Request) -> CheckpointRef:
        info = request.match_info
        return CheckpointRef(info["model_id"], info["kind"], info["name"])

    async def weights_info(self, request: web.Request) -> web.Response:
        ref = CheckpointRef.from_tinker_path((await request.json())["tinker_path"])
        self.store.find(ref)
        info = self.store.run_info(ref.model_id)
        return web.json_response(
            {
                "base_model": info.base_model,
                "is_lora": True,
                "lora_rank": info.lora_rank,
                "train_unembed": info.train_unembed,
                "train_mlp": info.train_mlp,
                "train_attn": info.train_attn,
            }
        )

    async def set_ttl(self, request: web.Request) -> web.Response:
        ttl_seconds = (await request.json()).get("ttl_seconds")
        check_ttl(ttl_seconds)
        self.store.set_ttl(self._ref(request), ttl_seconds)
        return web.json_response({})

    async def delete_checkpoint(self, request: web.Request) -> web.Response:
        self.store.delete(self._ref(request))
        return web.json_response({})

    async def archive_url(self, request: web.Request) -> web.Response:
        """Where Sail downloads the adapter: a loopback URL on this same server."""
        ref = self._ref(request)
        expires_at = self.store.expires_at(ref) or time.time() + ARCHIVE_URL_SECONDS
        url = f"{self.public_url}{ARCHIVE_ROUTE}/{ref.model_id}/{ref.kind}/{ref.name}.tar"
        expires = datetime.fromtimestamp(expires_at, UTC).isoformat()
        return web.json_response({"url": url, "expires": expires})

    async def archive(self, request: web.Request) -> web.StreamResponse:
        """The adapter archive itself; 404 once the checkpoint is deleted or expired."""
        info = request.match_info
        try:
            ref = CheckpointRef(info["model_id"], info["kind"], info["name"])
            path = self.store.archive(ref)
        except (ValueError, CheckpointNotFound) as e:
            return _error(404, str(e))
        return web.FileResponse(path, headers={"Content-Type": "application/x-tar"})


def _new_trainer(info: RunInfo, seed: int) -> LoraTrainer:
    base_model, vocab = load_base_model()
    return LoraTrainer(
        base_model,
        vocab,
        adapter_config_for(info.lora_rank),
        seed=seed,
        trained_groups=[g for g in MODULE_GROUPS if getattr(info, g)],
    )


_TENSOR_DTYPES = {pb.DTYPE_FLOAT32: np.dtype(np.float32), pb.DTYPE_INT64: np.dtype(np.int64)}


def _datum_from_proto(msg: pb.Datum) -> TrainingDatum:
    """Decode one wire datum: text tokens (int32 bytes) and dense loss-input tensors."""
    tokens = []
    for chunk in msg.model_input:
        if chunk.WhichOneof("chunk") != "encoded_text":
            raise MalformedDatum("the local model reads text only (no image or audio chunks)")
        tokens.append(np.frombuffer(chunk.encoded_text.tokens, dtype=np.int32))
    loss_inputs = {}
    for name, tensor in msg.loss_fn_inputs.items():
        if tensor.WhichOneof("encoding") == "sparse_csr":
            raise MalformedDatum(f"loss_fn_inputs[{name!r}] is sparse; send a dense 1-D tensor")
        expected = np.dtype(np.int64 if name == "target_tokens" else np.float32)
        if _TENSOR_DTYPES.get(tensor.dtype) != expected:
            raise MalformedDatum(f"loss_fn_inputs[{name!r}] must be {expected}")
        values = np.frombuffer(tensor.dense, dtype=expected)
        shape = list(tensor.shape) or [values.size]
        if int(np.prod(shape)) != values.size:
            raise MalformedDatum(f"loss_fn_inputs[{name!r}] has {values.size} values for {shape}")
        loss_inputs[name] = values.reshape(shape).copy()  # frombuffer is read-only
    input_ids = np.concatenate(tokens).astype(np.int64) if tokens else np.zeros(0, np.int64)
    return TrainingDatum(input_ids, loss_inputs)


def _forward_backward_output(result: ForwardBackwardResult) -> bytes:
    """A protobuf ForwardBackwardOutput: each datum's logprobs, batched, and `loss:sum`."""
    logprobs = [lp.astype(np.float32) for lp in result.logprobs]
    offsets = np.cumsum([0] + [lp.nbytes for lp in logprobs], dtype=np.int64)
    batched = pb.BatchedTensor(
        data=b"".join(lp.tobytes() for lp in logprobs),
        offsets=offsets.tobytes(),
        dtype=pb.DTYPE_FLOAT32,
    )
    record = pb.ArrayRecord(fields={"logprobs": batched}, num_datums=len(logprobs))
    output = pb.ForwardBackwardOutput(
        loss_fn_output_type="ArrayRecord",
        loss_fn_outputs=[record],
        metrics={"loss:sum": result.loss_sum},
    )
    return output.SerializeToString()


SERVICE = web.AppKey("tinker_service", TinkerService)


def setup(app: web.Application, public_url: str) -> None:
    """Add the Tinker routes to the local stack's app.

    `public_url` is the stack's base URL (archive URLs point back at it); checkpoints go to
    `app["storage_dir"] / "tinker"`, which persists across stack restarts.
    """
    service = TinkerService(CheckpointStore(Path(app["storage_dir"]) / "tinker"), public_url)
    app[SERVICE] = service
    app.on_startup.append(service.start)
    app.on_cleanup.append(service.stop)
    api = "/api/v1"
    checkpoint = api + "/training_runs/{model_id}/checkpoints/{kind}/{name}"
    routes = [
        ("POST", "/client/config", service.client_config),
        ("POST", "/client/dynamic_config", service.client_dynamic_config),
        ("POST", "/create_session", service.create_session),
        ("POST", "/session_heartbeat", service.session_heartbeat),
        ("POST", "/sessions/{session_id}/finish", service.finish_session),
        ("POST", "/telemetry", service.telemetry),
        ("GET", "/get_server_capabilities", service.server_capabilities),
        ("POST", "/create_model", service.create_model),
        ("POST", "/get_info", service.get_info),
        ("POST", "/forward_backward", service.forward_backward),
        ("POST", "/optim_step", service.optim_step),
        ("POST", "/save_weights_for_sampler", service.save_weights_for_sampler),
        ("POST", "/save_weights", service.save_weights),
        ("POST", "/load_weights", service.load_weights),
        ("POST", "/retrieve_future", service.retrieve_future),
        ("POST", "/weights_info", service.weights_info),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, api + path, _api(handler))
    app.router.add_put(checkpoint + "/ttl", _api(service.set_ttl))
    app.router.add_get(checkpoint + "/archive", _api(service.archive_url))
    app.router.add_delete(checkpoint, _api(service.delete_checkpoint))
    app.router.add_get(ARCHIVE_ROUTE + "/{model_id}/{kind}/{name}.tar", service.archive)
