"""Tinker's own adapter layout, which the stack's checkpoints and archives hold.

What is known, and where from. The pinned cookbook's `tinker_cookbook.weights.build_lora_adapter`
(`weights/_adapter.py`, `_merge_utils.py`, `weights/README.md`) converts a Tinker adapter into
PEFT, so what it reads is what a Tinker archive holds:
- two files, `adapter_model.safetensors` and `adapter_config.json`
  (`_artifacts.load_adapter_weights`);
- tensor names `base_model.model.<module path>.lora_A.weight` / `.lora_B.weight`, with Tinker's
  internal module names: the output layer is `model.unembed_tokens` (PEFT: `lm_head`), and
  MoE experts are one 3-D tensor per projection, `mlp.experts.w1` / `w2` / `w3`, shaped
  `(experts, r, in)` and `(experts, out, r)`, one side possibly shared (leading size 1);
- a config from which the cookbook reads only `r` and `lora_alpha`.

What is not known, and what the local stack does instead (the one list of guesses):
- the real config's other keys: the stack writes only `r` and `lora_alpha`, so nothing a
  reader could mistake for a PEFT config (no `peft_type`, `target_modules` or base model);
- the tensors' dtype: the stack writes float32 (its model is float32);
- other members of the archive (README, metadata files): the stack's tar has the two files.
The tiny model is dense, so its checkpoints have no expert layer. The mixture-of-experts mode
is `kimi.moe_archive`: an archive of a small Kimi K2-shaped model (`kimi.architecture.TINY_MOE`)
in this layout, 3-D expert tensors with the hidden-side factor shared, which notebook 09 and
tests/course/test_kimi_export.py convert with `build_lora_adapter`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import torch

PREFIX = "base_model.model."
PEFT_UNEMBED = f"{PREFIX}lm_head."
TINKER_UNEMBED = f"{PREFIX}model.unembed_tokens."


class NotTinkerLayout(ValueError):
    """Tensors or a config that are not a Tinker adapter; the message says which."""


def to_tinker(peft_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """PEFT's saved tensor names (`get_peft_model_state_dict`) -> Tinker's."""
    converted = {}
    for name, tensor in peft_state.items():
        if not name.startswith(PREFIX) or ".lora_" not in name:
            raise NotTinkerLayout(f"{name!r} is not a PEFT LoRA tensor name")
        converted[name.replace(PEFT_UNEMBED, TINKER_UNEMBED, 1)] = tensor
    return converted


def to_peft(tinker_state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tinker's tensor names -> PEFT's, refusing anything else (a PEFT file's `lm_head` too)."""
    converted = {}
    for name, tensor in tinker_state.items():
        if not name.startswith(PREFIX) or not name.endswith((".lora_A.weight", ".lora_B.weight")):
            raise NotTinkerLayout(f"tensor {name[:120]!r} is not a Tinker LoRA tensor")
        if name.startswith(PEFT_UNEMBED):
            raise NotTinkerLayout(
                f"tensor {name[:120]!r} uses PEFT's `lm_head`; Tinker names it `unembed_tokens`"
            )
        if tensor.ndim != 2:
            raise NotTinkerLayout(
                f"tensor {name[:120]!r} is {tensor.ndim}-D; this model has no experts"
            )
        converted[name.replace(TINKER_UNEMBED, PEFT_UNEMBED, 1)] = tensor
    return converted


def tinker_config(rank: int, lora_alpha: float) -> bytes:
    """The archive's `adapter_config.json`: the keys the cookbook reads, nothing more."""
    return (json.dumps({"lora_alpha": lora_alpha, "r": rank}, indent=2) + "\n").encode()
