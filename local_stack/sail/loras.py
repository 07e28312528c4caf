"""Named LoRAs built from uploaded files: `POST /v1/loras`, validated per model in the background.

What Sail's LoRA page documents, and this module follows: a LoRA is made from two uploaded
files (its `adapter_config.json` and `adapter_model.safetensors`), a `name` (2-64
characters of `a-z`, `0-9` and `-`, starting and ending with a letter or digit, unique:
a duplicate is a 409) and `supported_models` (known model ids). Creating it starts one
validation per supported model, reported under `validations` with a `status` of
`pending`, `running`, `succeeded` or `failed` (then `result_code` and `result_message`
say why); clients poll `GET /v1/loras/{name}`. A request samples with it by putting its
name or id in `metadata.lora`. A wrong base model or a rank over the limit fails
validation, not the create.

The documentation this was built from does not show the create body's file fields; the
local stack names them `config_file_id` and `weights_file_id`, guesses listed with every other
request field in `helpers/shipping.REQUEST_SHAPES`. Sail's page lists a fifth status,
`unverified`, whose meaning we could not read; this stack never reports it.

A LoRA belongs to the client that created it, and names are unique per client, as Sail's
are per organisation: each client lists, reads, deletes and samples with its own LoRAs
only, and another client's name or id answers 404 as if it did not exist. A LoRA is built
only from its own client's files.

Validation reuses the checks of the Tinker-archive path (`lora_config.parse_adapter_config`,
`adapters.apply_adapter`), then runs one forward pass of the adapted model.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import torch

from local_stack.engine.compute import run_compute
from local_stack.http import ApiError
from local_stack.sail.adapters import Adapter, apply_adapter
from local_stack.sail.files import FileStore
from local_stack.sail.lora_config import parse_adapter_config

NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}[a-z0-9]")
MAX_LORAS = 16  # each holds a PEFT-wrapped copy of the tiny model
MAX_CLIENT_LORAS = 4  # one client's share, so one kernel cannot take them all
# The create body's file fields, and the adapter file each must hold.
FILE_FIELDS = {
    "config_file_id": "adapter_config.json",
    "weights_file_id": "adapter_model.safetensors",
}
BASE_MODEL_MISMATCH = "base_model_mismatch"
VALIDATION_REQUEST_FAILED = "validation_request_failed"
# A few compact ids: the validation request's prompt (any ids of the tiny vocabulary work).
VALIDATION_PROMPT = [1, 2, 3, 4]


@dataclass(frozen=True)
class LoraSpec:
    """A create body, checked."""

    name: str
    supported_models: tuple[str, ...]
    file_ids: dict[str, str]  # field name -> file id


@dataclass
class Validation:
    """One supported model's validation record."""

    model: str
    status: str = "pending"
    result_code: str | None = None
    result_message: str | None = None

    def body(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "status": self.status,
            "result_code": self.result_code,
            "result_message": self.result_message,
        }


@dataclass
class Lora:
    """A registered LoRA: its own copy of the two files, validations, and once one has
    succeeded, the adapted model requests sample with."""

    id: str
    owner: str  # the client that created it
    spec: LoraSpec
    files: dict[str, bytes]  # adapter file name -> bytes
    created_at: float
    validations: list[Validation]
    adapter: Adapter | None = None
    task: asyncio.Task[None] | None = field(default=None, repr=False)

    def body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "lora",
            "name": self.spec.name,
            "created_at": int(self.created_at),
            "supported_models": list(self.spec.supported_models),
            **self.spec.file_ids,
            "validations": [v.body() for v in self.validations],
        }


def parse_create_body(body: Any, known_models: tuple[str, ...]) -> LoraSpec:
    """Check a `POST /v1/loras` body: name rules, known models, both file ids."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    name = body.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ApiError(
            f"name {str(name)[:80]!r} is not a valid LoRA name: use 2-64 characters of a-z, "
            "0-9 and '-', starting and ending with a letter or digit",
            param="name",
            code="invalid_name",
        )
    models = body.get("supported_models")
    if not isinstance(models, list) or not models or not all(isinstance(m, str) for m in models):
        raise ApiError(
            "supported_models must be a non-empty list of model ids", param="supported_models"
        )
    unknown = [m for m in models if m not in known_models]
    if unknown:
        raise ApiError(
            f"supported_models has {str(unknown)[:200]}, which are not known model ids; the "
            f"local stack serves {list(known_models)}",
            param="supported_models",
            code="unknown_model",
        )
    file_ids = {}
    for param, filename in FILE_FIELDS.items():
        file_id = body.get(param)
        if not isinstance(file_id, str) or not file_id:
            raise ApiError(
                f"{param} is missing: upload {filename} with POST /v1/files (purpose 'lora') "
                "and pass its id",
                param=param,
                code="missing_file",
            )
        file_ids[param] = file_id
    return LoraSpec(name, tuple(dict.fromkeys(models)), file_ids)


class LoraRegistry:
    """LoRAs by client and name (and id), their background validations, and lookups for
    sampling."""

    def __init__(self, files: FileStore, known_models: tuple[str, ...]) -> None:
        self.files = files
        self.known_models = known_models  # the model ids a LoRA may be registered for
        self._loras: dict[tuple[str, str], Lora] = {}  # by (owner, name)

    def create(self, owner: str, spec: LoraSpec) -> Lora:
        """Register the client's LoRA from its uploaded files and start validating it."""
        if (owner, spec.name) in self._loras:
            raise ApiError(
                f"a LoRA named {spec.name!r} already exists; delete it first or pick another name",
                status=409,
                param="name",
                code="duplicate_name",
            )
        owned = sum(lora.owner == owner for lora in self._loras.values())
        if owned >= MAX_CLIENT_LORAS or len(self._loras) >= MAX_LORAS:
            raise ApiError(
                f"the local stack keeps at most {MAX_CLIENT_LORAS} LoRAs per client and "
                f"{MAX_LORAS} in all (you have {owned}): delete one first",
                status=413,
                code="too_many_loras",
            )
        if len(set(spec.file_ids.values())) < len(spec.file_ids):
            raise ApiError(
                "config_file_id and weights_file_id are the same file; upload both files",
                code="missing_file",
            )
        files = {}
        for param, file_id in spec.file_ids.items():
            stored = self.files.get(owner, file_id, param)
            if stored.purpose != "lora":
                raise ApiError(
                    f"{param} names a file uploaded with purpose {stored.purpose!r}, not 'lora'",
                    param=param,
                )
            files[FILE_FIELDS[param]] = stored.data
        lora = Lora(
            id=f"lora_{uuid.uuid4().hex}",
            owner=owner,
            spec=spec,
            files=files,
            created_at=time.time(),
            validations=[Validation(model) for model in spec.supported_models],
        )
        self._loras[owner, spec.name] = lora
        lora.task = asyncio.ensure_future(self._validate(lora))
        return lora

    def get(self, owner: str, name_or_id: str, param: str = "name") -> Lora:
        lora = self._loras.get((owner, name_or_id)) or next(
            (lora for lora in self._loras.values() if (lora.owner, lora.id) == (owner, name_or_id)),
            None,
        )
        if lora is None:
            raise ApiError(
                f"no LoRA named (or with id) {name_or_id[:80]!r}",
                status=404,
                param=param,
                code="lora_not_found",
            )
        return lora

    def delete(self, owner: str, name_or_id: str) -> dict[str, Any]:
        lora = self.get(owner, name_or_id)
        del self._loras[owner, lora.spec.name]
        if lora.task is not None:
            lora.task.cancel()
        return {"id": lora.id, "object": "lora", "name": lora.spec.name, "deleted": True}

    def listing(self, owner: str) -> dict[str, Any]:
        loras = [lora.body() for lora in self._loras.values() if lora.owner == owner]
        return {"object": "list", "data": loras}

    def forget(self, owner: str) -> None:
        """Drop every LoRA of `owner`, a client that has left the stack, validations and all."""
        for lora in [lora for lora in self._loras.values() if lora.owner == owner]:
            self.delete(owner, lora.id)

    def adapter_for(self, owner: str, name_or_id: str, model: str) -> Adapter:
        """The client's adapter a request names in `metadata.lora`, if it validated for
        `model`."""
        lora = self.get(owner, name_or_id, param="metadata.lora")
        record = next((v for v in lora.validations if v.model == model), None)
        if record is None or record.status != "succeeded" or lora.adapter is None:
            state = "not requested" if record is None else record.status
            raise ApiError(
                f"LoRA {lora.spec.name!r} is not validated for {model!r} (validation: "
                f"{state}); poll GET /v1/loras/{lora.spec.name} until it has succeeded",
                param="metadata.lora",
                code="lora_not_validated",
            )
        return lora.adapter

    async def close(self) -> None:
        for lora in self._loras.values():
            if lora.task is not None:
                lora.task.cancel()

    async def _validate(self, lora: Lora) -> None:
        for record in lora.validations:
            record.status = "running"
            try:
                lora.adapter = await self._validated_adapter(lora, record.model)
            except Exception as error:  # whatever goes wrong is this LoRA's failure alone
                code = error.code if isinstance(error, ApiError) else None
                record.status, record.result_code = "failed", code or "validation_error"
                record.result_message = str(error)
            else:
                record.status = "succeeded"

    async def _validated_adapter(self, lora: Lora, model: str) -> Adapter:
        """Check the config, load it with PEFT, and answer one request with it."""
        raw_config = lora.files["adapter_config.json"]
        config = await asyncio.to_thread(parse_adapter_config, raw_config, "config_file_id")
        base = config.get("base_model_name_or_path")
        if base != model:
            raise ApiError(
                f"the adapter's base_model_name_or_path is {str(base)[:80]!r}, but it is "
                f"registered for {model!r}",
                code=BASE_MODEL_MISMATCH,
            )
        weights = lora.files["adapter_model.safetensors"]
        adapted = await run_compute(
            apply_adapter, config, weights, "weights_file_id", client=lora.owner
        )
        if not await run_compute(_answers_finitely, adapted, client=lora.owner):
            raise ApiError(
                "the adapted model's validation request gave non-finite logits",
                code=VALIDATION_REQUEST_FAILED,
            )
        digest = hashlib.sha256(b"".join(lora.files.values())).hexdigest()
        return Adapter(f"lora:{lora.id}", digest, config, adapted)


@torch.inference_mode()
def _answers_finitely(model: torch.nn.Module) -> bool:
    logits = model(input_ids=torch.tensor([VALIDATION_PROMPT])).logits
    return bool(torch.isfinite(logits).all())
