"""Notebook 02's exercise: snapshot the weights Tinker holds and serve exactly them through Sail.

The check runs the learner's `sail_policy` on the real clients (the local stack's, or the
cloud's): each call saves a checkpoint and signs its URL, and nothing is sampled. It compares
what the completer would ask Sail for: which checkpoint (the one this call saved for
sampling, a training state, an older one, or none: the base model), with which TTLs, and
with which sampling settings. To know which checkpoint a signed URL is for, the check hands
the learner's function thin wrappers of the clients that record each save and each signing;
a wrapped save gets a unique name, since Tinker refuses a taken one and the check calls every
version with the same `name`.
"""

from __future__ import annotations

import json
import uuid
from functools import partial
from typing import Any

import sail
import tinker

from exercises.check import Case, Exercise, Mistake
from helpers.serving import ROLLOUT_TIMEOUT_S, SnapshotCompleter, checkpoint_lifetime, sail_policy

# What each URL signed during the current check was signed for (cleared by each check).
_SIGNED: dict[str, dict[str, Any]] = {}
THIS_SAMPLER_CHECKPOINT = "the sampler checkpoint this call saved"
THIS_TRAINING_STATE = "the training state this call saved"
ANOTHER_CHECKPOINT = "a checkpoint this call did not just save"
BASE_MODEL = "the base model (no adapter)"


class _RecordedTraining:
    """The notebook's training client, recording its saves and giving each a unique name."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.latest: str | None = None  # the unique name of the last save started
        self.ttl_of: dict[str, int | None] = {}

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    def _unique(self, name: str, ttl_seconds: int | None) -> str:
        self.latest = f"{name}-{uuid.uuid4().hex[:8]}"
        self.ttl_of[self.latest] = ttl_seconds
        return self.latest

    def save_weights_for_sampler(self, name: str, ttl_seconds: int | None = None, **kw: Any) -> Any:
        return self._inner.save_weights_for_sampler(
            self._unique(name, ttl_seconds), ttl_seconds, **kw
        )

    async def save_weights_for_sampler_async(
        self, name: str, ttl_seconds: int | None = None, **kw: Any
    ) -> Any:
        unique = self._unique(name, ttl_seconds)
        return await self._inner.save_weights_for_sampler_async(unique, ttl_seconds, **kw)

    def save_state(self, name: str, ttl_seconds: int | None = None, **kw: Any) -> Any:
        return self._inner.save_state(self._unique(name, ttl_seconds), ttl_seconds, **kw)

    async def save_state_async(self, name: str, ttl_seconds: int | None = None, **kw: Any) -> Any:
        return await self._inner.save_state_async(
            self._unique(name, ttl_seconds), ttl_seconds, **kw
        )


class _RecordedService:
    """The notebook's service client, whose REST clients record each URL they sign."""

    def __init__(self, inner: Any, training: _RecordedTraining) -> None:
        self._inner, self._training = inner, training

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    def create_rest_client(self) -> Any:
        return _RecordedRest(self._inner.create_rest_client(), self._training)


class _RecordedRest:
    def __init__(self, inner: Any, training: _RecordedTraining) -> None:
        self._inner, self._training = inner, training
        self._ttl_set: dict[str, int | None] = {}

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._inner, attribute)

    async def set_checkpoint_ttl_from_tinker_path_async(self, path: str, ttl: int | None) -> Any:
        self._ttl_set[path] = ttl
        return await self._inner.set_checkpoint_ttl_from_tinker_path_async(path, ttl)

    async def get_checkpoint_archive_url_from_tinker_path_async(self, path: str) -> Any:
        answer = await self._inner.get_checkpoint_archive_url_from_tinker_path_async(path)
        *_, kind, name = path.split("/")
        if name != self._training.latest:  # nothing more matters: it is the wrong checkpoint
            _SIGNED[answer.url] = {"samples": ANOTHER_CHECKPOINT}
            return answer
        _SIGNED[answer.url] = {
            "samples": THIS_TRAINING_STATE if kind == "weights" else THIS_SAMPLER_CHECKPOINT,
            "path": path,
            "ttl_seconds (save, URL)": (self._training.ttl_of[name], self._ttl_set.get(path)),
        }
        return answer


def observed(completer: Any) -> dict[str, Any]:
    """What the completer would ask Sail for, in the terms the check compares."""
    url = getattr(completer, "tinker_lora_signed_url", None)
    signed = _SIGNED.get(url, {"samples": ANOTHER_CHECKPOINT}) if url else {"samples": BASE_MODEL}
    return {
        "completer": type(completer).__name__,
        "samples": signed["samples"],
        "remembers that checkpoint": getattr(completer, "checkpoint_path", None)
        == signed.get("path"),
        "ttl_seconds (save, URL, renewals)": (
            *signed.get("ttl_seconds (save, URL)", (None, None)),
            getattr(completer, "ttl_seconds", None),
        ),
        **{
            setting: getattr(completer, setting, None)
            for setting in (
                "model",
                "max_tokens",
                "temperature",
                "completion_window",
                "poll_timeout",
                "adapter_config",
                "tinker_lora_name",
            )
        },
    }


def _same_request(got: Any, expected: Any) -> bool:
    return observed(got) == observed(expected)


def _cases(
    training_client: Any, service_client: Any, adapter_config: dict, model_name: str
) -> list[Case]:
    _SIGNED.clear()
    training = _RecordedTraining(training_client)
    clients = (training, _RecordedService(service_client, training), adapter_config)
    return [
        Case(
            "a balanced policy at temperature 0.7, 16 tokens",
            (*clients, "exercise-balanced"),
            dict(model_name=model_name, max_tokens=16, temperature=0.7, ttl_seconds=3600),
        ),
        Case(
            "a flex policy for an overnight evaluation, with its own LoRA name",
            (*clients, "exercise-flex"),
            dict(
                model_name=model_name,
                max_tokens=24,
                temperature=1.0,
                completion_window="flex",
                ttl_seconds=3600,
                lora_name="overnight-eval",
            ),
        ),
    ]


async def _with_one_thing_wrong(
    training_client: Any,
    service_client: Any,
    adapter_config: dict,
    name: str,
    *,
    model_name: str,
    max_tokens: int,
    temperature: float,
    completion_window: str = "balanced",
    ttl_seconds: int = 3600,
    lora_name: str | None = None,
    wrong: str,
) -> Any:
    """`sail_policy` with the one mistake `wrong` names."""
    given_ttl_seconds = ttl_seconds
    if wrong != "ttl not stretched":
        ttl_seconds = checkpoint_lifetime(completion_window, ttl_seconds)
    older_path = None
    if wrong == "older checkpoint":  # as `save_result` from a cell above would be
        older = await training_client.save_weights_for_sampler_async(f"{name}-older", ttl_seconds)
        older_path = (await older).path
    save = (
        training_client.save_state_async
        if wrong == "training state"
        else training_client.save_weights_for_sampler_async
    )
    save_ttl = {} if wrong == "save without ttl" else {"ttl_seconds": ttl_seconds}
    save_result = await (await save(name, **save_ttl))
    url_ttl = {} if wrong == "url without ttl" else {"ttl_seconds": ttl_seconds}
    signed_url = await sail.get_tinker_checkpoint_signed_url_async(
        service_client, older_path or save_result.path, **url_ttl
    )
    settings: dict[str, Any] = dict(
        model=model_name,
        max_tokens=max_tokens,
        temperature=temperature,
        completion_window=completion_window,
        poll_timeout=ROLLOUT_TIMEOUT_S[completion_window],
        tinker_lora_signed_url=signed_url,
        adapter_config=adapter_config,
        tinker_lora_name=name if wrong == "lora name ignored" else lora_name or name,
    )
    if wrong == "no adapter":
        for setting in ("tinker_lora_signed_url", "adapter_config", "tinker_lora_name"):
            del settings[setting]
    if wrong == "default temperature":
        del settings["temperature"]
    if wrong == "default poll timeout":
        del settings["poll_timeout"]
    if wrong == "plain completer":
        return sail.SailTokenCompleter(**settings)
    if wrong == "completer ttl not stretched":
        ttl_seconds = given_ttl_seconds
    return SnapshotCompleter(save_result.path, service_client, ttl_seconds, **settings)


async def _test_context() -> dict[str, Any]:
    """A fresh LoRA training client on the local stack the tests run."""
    from helpers.backend import ADAPTER_CONFIG_PATH, MODEL_NAME

    adapter_config = json.loads(ADAPTER_CONFIG_PATH.read_text())
    service_client = tinker.ServiceClient()
    training_client = await service_client.create_lora_training_client_async(
        base_model=MODEL_NAME, rank=adapter_config["r"]
    )
    return {
        "training_client": training_client,
        "service_client": service_client,
        "adapter_config": adapter_config,
        "model_name": MODEL_NAME,
    }


def _mistake(name: str, hint: str, wrong: str) -> Mistake:
    return Mistake(name, hint, partial(_with_one_thing_wrong, wrong=wrong))


SNAPSHOT_AND_SERVE = Exercise(
    name="sail_policy",
    notebook="02_snapshot_and_serve",
    minutes=15,
    reference=sail_policy,
    cases=_cases,
    same=_same_request,
    mistakes=[
        _mistake(
            "saved the training state instead of sampler weights",
            "you saved with `save_state_async`: that writes the training state (weights and "
            "optimizer, a `.../weights/...` path) for resuming a run. Sail samples from a "
            "sampler checkpoint, weights only: `save_weights_for_sampler_async`.",
            "training state",
        ),
        _mistake(
            "sampled an older checkpoint",
            "the signed URL is not for the checkpoint this call just saved (a `signed_url` or "
            "`save_result` from a cell above, perhaps). Sign the `path` of the save you just "
            "awaited, through the `service_client` argument, so Sail samples the current weights.",
            "older checkpoint",
        ),
        _mistake(
            "no adapter: sampled the base model",
            "the completer has no `tinker_lora_signed_url`, so Sail samples the base model, "
            "not the weights being trained. Pass the signed URL, the `adapter_config` and "
            "`tinker_lora_name` (`lora_name`, else `name`).",
            "no adapter",
        ),
        _mistake(
            "the TTL not stretched to the completion window",
            "you used `ttl_seconds` as given. A flex rollout may wait 12 hours, longer than "
            "the checkpoint would live: use `checkpoint_lifetime(completion_window, "
            "ttl_seconds)` for the save, the URL and the completer alike.",
            "ttl not stretched",
        ),
        _mistake(
            "the save given no TTL",
            "you saved without `ttl_seconds`: Tinker then keeps the checkpoint until it is "
            "deleted (its docstring: None = never expires), so one a crash leaves behind is "
            "never cleaned up. Pass `ttl_seconds=checkpoint_lifetime(completion_window, "
            "ttl_seconds)` to the save.",
            "save without ttl",
        ),
        _mistake(
            "the URL signed without a TTL",
            "you signed the URL without `ttl_seconds`. Given one, "
            "`sail.get_tinker_checkpoint_signed_url_async` first sets the checkpoint's TTL, "
            "counted from now, so it lives as long as the rollouts need it: pass the same "
            "`checkpoint_lifetime(...)` TTL as the save.",
            "url without ttl",
        ),
        _mistake(
            "the completer given the TTL as passed",
            "you saved and signed with the stretched TTL, but gave the completer `ttl_seconds` "
            "as passed: it renews the checkpoint and its URL with it, so a flex rollout could "
            "outlive them. Give the completer the same `checkpoint_lifetime(...)` TTL.",
            "completer ttl not stretched",
        ),
        _mistake(
            "the temperature left at the SDK's default",
            "the completer samples at temperature 1.0, the SDK's default: pass "
            "`temperature=temperature` (and `max_tokens=max_tokens`) to the completer.",
            "default temperature",
        ),
        _mistake(
            "the poll timeout left at the SDK's 20 minutes",
            "`poll_timeout` is the SDK's default, 20 minutes, whatever the window: pass "
            "`poll_timeout=ROLLOUT_TIMEOUT_S[completion_window]` (10 minutes for balanced, "
            "12 hours for flex).",
            "default poll timeout",
        ),
        _mistake(
            "a plain SailTokenCompleter",
            "you returned a plain `sail.SailTokenCompleter`. Return a `SnapshotCompleter`: it "
            "remembers `checkpoint_path` (notebook 04 deletes it when the step is done), "
            "renews the URL and retries.",
            "plain completer",
        ),
        _mistake(
            "lora_name ignored",
            "this call passed its own `lora_name`, and your completer's `tinker_lora_name` is "
            "`name` (the two lines above look alike: the completer's repr does not show it). "
            "Pass `tinker_lora_name=lora_name or name`.",
            "lora name ignored",
        ),
    ],
    test_context=_test_context,
    needs_stack=True,
)
