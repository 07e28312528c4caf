"""Request parsing for the local Tinker service: request bodies in, checked plain values out.

Everything a request can get wrong without looking at the service's state is refused here,
with a ValueError that says what is wrong (the routes answer it as a 400). The SDK's own
pydantic request types (`tinker.types`) define the JSON shapes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Generic, TypeVar

import pydantic
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from local_stack.engine.checkpoints import CheckpointRef, RunInfo, check_name, check_ttl
from local_stack.engine.model import BASE_MODEL_NAME, MAX_CONTEXT_TOKENS
from local_stack.engine.trainer import LOSS_FNS, MalformedDatum, TrainingDatum, check_datum
from local_stack.tinker import wire

MAX_LORA_RANK = 128

M = TypeVar("M")
Model = TypeVar("Model", bound=pydantic.BaseModel)


def json_object(body: bytes) -> dict:
    """A JSON object from a request body."""
    value = json.loads(body)
    if not isinstance(value, dict):
        raise ValueError(f"the request body must be a JSON object, not {type(value).__name__}")
    return value


def validated(model: type[Model], value: object) -> Model:
    return model.model_validate(value)


def parse(model: type[Model], body: bytes) -> Model:
    """A JSON body validated as one of the SDK's request types."""
    return validated(model, json_object(body))


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
    return Queued(message.get("model_id"), message.get("seq_id"), message)


def queued_forward_backward(body: bytes) -> Queued[pb.ForwardBackwardRequest]:
    message = wire.decode_forward_backward(body)
    return Queued(message.model_id, message.seq_id, message)


@dataclass(frozen=True)
class ForwardBackward:
    data: list[TrainingDatum]
    loss_fn: str
    backward: bool


def forward_backward(msg: pb.ForwardBackwardRequest) -> ForwardBackward:
    if msg.loss_fn not in LOSS_FNS:
        available = ", ".join(sorted(LOSS_FNS))
        raise ValueError(f"loss_fn {msg.loss_fn!r} is not available locally: {available}")
    if msg.loss_fn_config or msg.loss_fn_config_v2:
        raise ValueError(f"{msg.loss_fn} takes no loss_fn_config")
    data = [wire.decode_datum(d) for d in msg.data]
    if not data:
        raise ValueError("forward_backward needs at least one datum")
    for i, datum in enumerate(data):
        try:
            check_datum(datum, msg.loss_fn, MAX_CONTEXT_TOKENS)
        except MalformedDatum as e:
            raise MalformedDatum(f"datum {i}: {e}") from e
    return ForwardBackward(data, msg.loss_fn, backward=not msg.forward_only)


def adam_params(message: dict) -> types.AdamParams:
    hp = validated(types.OptimStepRequest, message).optim_params
    if not isinstance(hp, types.AdamParams):
        raise ValueError("the local stack's optimizer is Adam: pass AdamParams")
    if not (hp.learning_rate >= 0 and 0 <= hp.beta1 < 1 and 0 <= hp.beta2 < 1):
        raise ValueError("Adam needs learning_rate >= 0 and betas in [0, 1)")
    if not (hp.eps > 0 and hp.weight_decay >= 0 and hp.grad_clip_norm >= 0):
        raise ValueError("Adam needs eps > 0, weight_decay >= 0, grad_clip_norm >= 0")
    return hp


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
    info = RunInfo(BASE_MODEL_NAME, lora.rank, lora.train_unembed, lora.train_mlp, lora.train_attn)
    return NewModel(req.session_id, req.model_seq_id, info, lora.seed)


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
