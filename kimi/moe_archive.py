"""A small mixture-of-experts adapter in Tinker's real layout, and a base-model stand-in for
it, so that `build_lora_adapter`'s expert path runs on this machine.

The local model is dense, so none of the stack's archives has an expert layer, and Kimi K2.6's
is too large to build here. `write_tinker_moe_adapter` writes what a Tinker archive of a small
Kimi K2-shaped model (`kimi.architecture.TINY_MOE`) holds: the two files the converter reads
(`local_stack/engine/tinker_layout.py` lists what is known of them), with every expert layer's
projection as one 3-D tensor and the hidden-side factor shared by all experts (leading size
1), in float32 like the stack's other archives. `write_base_model_stand_in` writes the
model's `config.json` and one safetensors file with an empty tensor under each weight name,
which is all the converter reads of a base model (as notebook 09's cloud stand-in for Kimi
K2.6). Notebook 09 converts the pair, and tests/course/test_kimi_export.py checks the copies.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from kimi.architecture import MoeArchitecture, hf_weight_names, tinker_lora_shapes

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def write_tinker_moe_adapter(
    directory: Path, arch: MoeArchitecture, rank: int, seed: int = 0, lora_alpha: float = 32.0
) -> Path:
    """`directory`/adapter.tar and its two files: a random adapter of `arch` in Tinker's layout."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    tensors = {
        name: torch.randn(shape, generator=generator) / rank
        for name, shape in tinker_lora_shapes(arch, rank).items()
    }
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, directory / "adapter_model.safetensors")
    config = {"lora_alpha": lora_alpha, "r": rank}  # the keys the cookbook reads, as the stack
    (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")
    archive = directory / "adapter.tar"
    with tarfile.open(archive, "w") as tar:
        for name in ADAPTER_FILES:
            tar.add(directory / name, arcname=name)
    return archive


def write_base_model_stand_in(directory: Path, arch: MoeArchitecture) -> Path:
    """`config.json` and the weight names of `arch`: what the converter reads of a base model."""
    import torch
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file(
        {name: torch.empty(0) for name in hf_weight_names(arch)}, directory / "names.safetensors"
    )
    (directory / "config.json").write_text(json.dumps(arch.hf_config(), indent=2) + "\n")
    return directory
