"""Request parsing for the local Tinker service: request bodies in, checked plain values out.

Everything a request can get wrong without looking at the service's state is refused here,
with a ValueError that says what is wrong (the routes answer it as a 400). The SDK's own
pydantic request types (`tinker.types`) define the JSON shapes.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import pydantic
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from local_stack.engine.checkpoints import CheckpointRef, RunInfo, check_name, check_ttl
from local_stack.engine.model import BASE_MODEL_DIRS, MAX_CONTEXT_TOKENS
from local_stack.engine.trainer import (
    LOSS_FNS,
    MalformedDatum,
    TrainingDatum,
    check_datum,
    loss_config,
)
from local_stack.tinker import wire

MAX_LORA_RANK = 128
MAX_ID_CHARS = 128
MAX_SEQ_ID = 2**31 - 1  # seq ids and model_seq_ids are int32 on Tinker's wire
MAX_SEED = 2**63 - 1
# Datums in one forward_backward request: the SDK sends a larger batch as chunks of at most
# this many (its `fwdbwd_max_chunk_len`, which the stack's client config also names), so
# only a hand-made request has more; each datum costs Python work to decode and check.
MAX_DATUMS = 1024
# The optimizer settings the local stack accepts, and how its 400 message says so.
ADAM_RANGES: dict[str, tuple[Callable[[float], bool], str]] = {
    "learning_rate": (lambda x: 0 <= x <= 1, "between 0 and 1"),
    "beta1": (lambda x: 0 <= x < 1, "at least 0 and below 1"),
    "beta2": (lambda x: 0 <= x < 1, "at least 0 and below 1"),
    "eps": (lambda x: 0 < x <= 1, "above 0 and at most 1"),
    "weight_decay": (lambda x: 0 <= x <= 1, "between 0 and 1"),
    "grad_clip_norm": (lambda x: x >= 0, "a finite number, at least 0 (0 turns clipping off)"),
}

M = TypeVar("M")
Model = TypeVar("Model", bound=pydantic.BaseModel)


def json_object(body: bytes) -> dict:
    """A JSON object from a request body."""
    try:
        value = json.loads(body.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(f"the request body is not UTF-8: {e}") from e
    except json.JSONDecodeError as e:
        raise ValueError(f"the request body is not JSON: {e}") from e
    except RecursionError as e:
        raise ValueError("the request body's JSON is nested too deeply") from e
    if not isinstance(value, dict):
        raise ValueError(f"the request body must be a JSON object, not {type(value).__name__}")
    return value


def validated(model: type[Model], value: object) -> Model:
    """`value` as the SDK request type `model`; a ValueError naming each wrong field."""
    try:
        return model.model_validate(value)
    except pydantic.ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(map(str, error['loc'])) or 'body'}: {error['msg']}"
            for error in e.errors(include_url=False)
        )
        raise ValueError(f"invalid {model.__name__}: {problems:.500}") from None


def parse(model: type[Model], body: bytes) -> Model:
    """A JSON body validated as one of the SDK's request types."""
    return validated(model, json_object(body))


def check_int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}; got {value!r:.40}")
    return value


def check_id(name: str, value: object) -> str:
    if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
        raise ValueError(f"{name} must be a string of 1 to {MAX_ID_CHARS} characters")
    return value


def create_session(body: bytes) -> types.CreateSessionRequest:
    return parse(types.CreateSessionRequest, body)


def session_id(body: bytes) -> str:
    return check_id("session_id", parse(types.SessionHeartbeatRequest, body).session_id)


def model_id(body: bytes) -> str:
    return check_id("model_id", parse(types.GetInfoRequest, body).model_id)


def request_id(body: bytes) -> str:
    return check_id("request_id", parse(types.FutureRetrieveRequest, body).request_id)


# -- requests to a model: their position in its queue, then the rest -----------------------


@dataclass(frozen=True)
class Queued(Generic[M]):
    """A request to a training model: which model, its `seq_id`, and the unparsed rest.

    The rest is parsed only once the seq_id is claimed, so a request refused for its content
    still uses up its place and the model's later requests do not wait for it.
    """

    model_id: str
    seq_id: int | None
    message: M


def queued_json(body: bytes) -> Queued[dict]:
    message = json_object(body)
    return _queued(message.get("model_id"), message.get("seq_id"), message)


def queued_forward_backward(body: bytes) -> Queued[pb.ForwardBackwardRequest]:
    message = wire.decode_forward_backward(body)
    return _queued(message.model_id, message.seq_id, message)


@dataclass(frozen=True)
class Decoded:
    """A request to a model, decoded: its position, its body's digest (a retry sends the same
    body), and its parsed rest or the error parsing it raised, raised only once its seq_id
    is claimed (see `Queued`). Plain values: it may come back from the decode process."""

    model_id: str
    seq_id: int | None
    digest: str
    parsed: object = None
    error: Exception | None = None

    def message(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.parsed


def decoded(read: Callable[[bytes], Queued], parse: Callable[[Any], Any], body: bytes) -> Decoded:
    """`body` read (its position; errors raise now) and parsed (errors wait, see `Decoded`)."""
    queued = read(body)
    digest = hashlib.sha256(body).hexdigest()
    try:
        return Decoded(queued.model_id, queued.seq_id, digest, parsed=parse(queued.message))
    except Exception as error:
        return Decoded(queued.model_id, queued.seq_id, digest, error=error)


def _queued(model_id: object, seq_id: object, message: M) -> Queued[M]:
    """Only a seq_id the SDK could have sent: from 1 (None in JSON: the model's next)."""
    checked = None if seq_id is None else check_int("seq_id", seq_id, 1, MAX_SEQ_ID)
    return Queued(check_id("model_id", model_id), checked, message)


@dataclass(frozen=True)
class ForwardBackward:
    data: list[TrainingDatum]
    loss_fn: str
    backward: bool
    config: dict[str, float]


def forward_backward(msg: pb.ForwardBackwardRequest) -> ForwardBackward:
    if msg.loss_fn not in LOSS_FNS:
        available = ", ".join(sorted(LOSS_FNS))
        raise ValueError(f"loss_fn {msg.loss_fn!r:.40} is not available locally: {available}")
    config = loss_config(msg.loss_fn, sent_loss_config(msg))
    if not msg.data:
        raise ValueError("forward_backward needs at least one datum")
    if len(msg.data) > MAX_DATUMS:
        raise ValueError(
            f"forward_backward takes at most {MAX_DATUMS} datums in one request, got "
            f"{len(msg.data)}: send the batch through the SDK, which splits it into chunks"
        )
    data = []
    for i, wire_datum in enumerate(msg.data):
        try:
            data.append(wire.decode_datum(wire_datum))
            check_datum(data[-1], msg.loss_fn, MAX_CONTEXT_TOKENS)
        except MalformedDatum as e:
            raise MalformedDatum(f"datum {i}: {e}") from e
    return ForwardBackward(data, msg.loss_fn, backward=not msg.forward_only, config=config)


def sent_loss_config(msg: pb.ForwardBackwardRequest) -> dict[str, float]:
    """The loss_fn_config as sent: `loss_fn_config_v2` when set (the SDK writes both, and the
    proto says servers prefer v2), else the legacy float map. Its values must be numbers."""
    if not msg.loss_fn_config_v2:
        return dict(msg.loss_fn_config)
    config = {}
    for key, value in msg.loss_fn_config_v2.items():
        if value.WhichOneof("value") != "number":
            raise ValueError(
                f"loss_fn_config[{key!r:.40}] must be a number; got {value.text!r:.40}"
            )
        config[key] = value.number
    return config


def adam_params(message: dict) -> types.AdamParams:
    sent = message.get("adam_params")
    for name in ADAM_RANGES:  # before pydantic, whose message for a null would not say why
        if isinstance(sent, dict) and name in sent and sent[name] is None:
            _check_adam_param(name, None)
    hp = validated(types.OptimStepRequest, message).optim_params
    if not isinstance(hp, types.AdamParams):
        raise ValueError("the local stack's optimizer is Adam: pass AdamParams")
    for name in ADAM_RANGES:
        _check_adam_param(name, getattr(hp, name))
    return hp


def _check_adam_param(name: str, value: float | None) -> None:
    allowed, allowed_text = ADAM_RANGES[name]
    if value is None or not (math.isfinite(value) and allowed(value)):
        # JSON has no inf or nan: the SDK sends them as null.
        shown = "null (inf or nan)" if value is None else repr(value)
        raise ValueError(f"adam_params.{name} must be {allowed_text}; got {shown}")


@dataclass(frozen=True)
class Save:
    """Save the model's weights as `<kind>/<name>`: for Sail, or (`weights`) to resume."""

    kind: str
    name: str
    ttl_seconds: int | None
    overwrite: bool


def save_weights_for_sampler(message: dict) -> Save:
    req = validated(types.SaveWeightsForSamplerRequest, message)
    if req.path is None:
        raise ValueError("pass a name: the local stack samples through Sail, not sampling sessions")
    return _save("sampler_weights", req.path, req.ttl_seconds, overwrite=True)


def save_weights(message: dict) -> Save:
    req = validated(types.SaveWeightsRequest, message)
    return _save("weights", req.path or "", req.ttl_seconds, req.overwrite)


def _save(kind: str, name: str, ttl_seconds: int | None, overwrite: bool) -> Save:
    check_name(name)
    check_ttl(ttl_seconds)
    return Save(kind, name, ttl_seconds, overwrite)


@dataclass(frozen=True)
class Load:
    ref: CheckpointRef
    with_optimizer: bool


def load_weights(message: dict) -> Load:
    req = validated(types.LoadWeightsRequest, message)
    ref = CheckpointRef.from_tinker_path(req.path)
    if ref.kind != "weights":
        raise ValueError(f"load_state takes a save_state path (…/weights/…): {req.path}")
    return Load(ref, req.optimizer)


# -- sessions and model creation -----------------------------------------------------------


@dataclass(frozen=True)
class NewModel:
    session_id: str
    model_seq_id: int
    info: RunInfo
    seed: int | None


def new_model(body: bytes) -> NewModel:
    req = parse(types.CreateModelRequest, body)
    session_id = check_id("session_id", req.session_id)
    model_seq_id = check_int("model_seq_id", req.model_seq_id, 0, MAX_SEQ_ID)
    if req.base_model not in BASE_MODEL_DIRS:
        raise ValueError(
            f"base model {req.base_model!r:.80} is not served by the local stack; "
            f"use one of {list(BASE_MODEL_DIRS)}"
        )
    lora = req.lora_config
    if lora is None:
        raise ValueError("the local stack trains LoRA adapters only: pass a lora_config")
    check_int("lora_config.rank", lora.rank, 1, MAX_LORA_RANK)
    if lora.seed is not None:
        check_int("lora_config.seed", lora.seed, 0, MAX_SEED)
    if req.optimizer_config.type != "adamw":
        raise ValueError(f"optimizer {req.optimizer_config.type!r:.40} is not available; use Adam")
    info = RunInfo(req.base_model, lora.rank, lora.train_unembed, lora.train_mlp, lora.train_attn)
    return NewModel(session_id, model_seq_id, info, lora.seed)


# -- checkpoints (RestClient) --------------------------------------------------------------


class _TinkerPath(pydantic.BaseModel):
    tinker_path: str


class _Ttl(pydantic.BaseModel):
    ttl_seconds: int | None = None


def tinker_path(body: bytes) -> CheckpointRef:
    return CheckpointRef.from_tinker_path(parse(_TinkerPath, body).tinker_path)


def ttl_seconds(body: bytes) -> int | None:
    ttl = parse(_Ttl, body).ttl_seconds
    check_ttl(ttl)
    return ttl


def checkpoint_ref(match_info: dict[str, str]) -> CheckpointRef:
    """The checkpoint a RestClient URL names (`.../{model_id}/checkpoints/{kind}/{name}`)."""
    return CheckpointRef(match_info["model_id"], match_info["kind"], match_info["name"])
