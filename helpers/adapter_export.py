"""Notebook 08's export: how big a Tinker archive is before it is downloaded, room on disk for
it, and the base-model directory `tinker_cookbook.weights.build_lora_adapter` converts against.

A Tinker archive holds the adapter in Tinker's own layout (see `local_stack/engine/
tinker_layout.py` for what is known of it); `build_lora_adapter` turns it into the two PEFT
files Sail's `/v1/loras` takes. The converter reads the base model's `config.json` (to pick
the model family) and the names of its weights (to place `unembed_tokens`); it never reads a
weight. So in the cloud a stand-in directory of those two things replaces the ~600 GB Kimi
K2.6 checkpoint, which `build_lora_adapter` would otherwise download in full.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.errors import CourseConfigError

KIMI_K26 = "moonshotai/Kimi-K2.6"
BF16_BYTES = 2
# At most two copies are on disk at once: the archive and its unpacked files (the archive is
# deleted then), later the unpacked and the converted files; a little more for the file system.
DISK_COPIES = 2
DISK_SLACK = 1.1


@dataclass(frozen=True)
class ArchiveEstimate:
    """LoRA parameters of an adapter and the bytes its archive takes in bf16."""

    parameters: int
    archive_bytes: int
    how: str  # one sentence: what the figure assumes

    @property
    def disk_bytes(self) -> int:
        return int(self.archive_bytes * DISK_COPIES * DISK_SLACK)


def lora_pairs(in_features: int, out_features: int, rank: int) -> int:
    """Parameters of one LoRA on an in -> out linear layer: A (r x in) and B (out x r)."""
    return rank * (in_features + out_features)


def estimate_tiny_llama(config: dict[str, Any], rank: int, targets: list[str]) -> ArchiveEstimate:
    """Exact for the local model: every targeted linear layer of a Llama config, float32."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    shapes = {
        "q_proj": (hidden, hidden),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (hidden, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }
    per_layer = sum(lora_pairs(*shapes[m], rank) for m in targets if m in shapes)
    parameters = per_layer * config["num_hidden_layers"]
    if "lm_head" in targets:
        parameters += lora_pairs(hidden, config["vocab_size"], rank)
    return ArchiveEstimate(parameters, parameters * 4, "every targeted layer of the tiny model")


def estimate_kimi_k26(rank: int) -> ArchiveEstimate:
    """Kimi K2.6 with LoRA on every layer Tinker adapts (MLP, attention, unembedding), in bf16.

    The parameter count is the cookbook's `get_lora_param_count`, from the table Tinker bakes
    in: routed experts share their hidden-side factor, and attention counts `q_a_proj`,
    `kv_a_proj_with_mqa` and `o_proj` only. Every Kimi adapter size the course states comes
    from here. Assumed, not documented: the archive stores those parameters in bf16."""
    from tinker_cookbook.hyperparam_utils import get_lora_param_count

    parameters = get_lora_param_count(KIMI_K26, lora_rank=rank)
    how = (
        "the cookbook's LoRA parameter count for Kimi K2.6, in bf16 "
        "(Tinker's archive format and dtype are not documented)"
    )
    return ArchiveEstimate(parameters, parameters * BF16_BYTES, how)


def check_free_disk(directory: Path, estimate: ArchiveEstimate) -> int:
    """Free bytes where `directory` lives; refuses in one sentence if the export won't fit."""
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if free < estimate.disk_bytes:
        raise CourseConfigError(
            f"{directory} has {free / 1e9:.1f} GB free, but downloading, unpacking and "
            f"converting a {estimate.archive_bytes / 1e9:.1f} GB archive needs about "
            f"{estimate.disk_bytes / 1e9:.1f} GB: free some space, or set COURSE_RUNS_DIR "
            "to a disk that has it."
        )
    return free


def local_base_model_dir(directory: Path) -> Path:
    """The tiny local model saved as a Hugging Face model directory (config.json + weights)."""
    from safetensors.torch import save_file

    from helpers.backend import tiny_base_model

    if not (directory / "config.json").exists():
        model, _ = tiny_base_model()
        directory.mkdir(parents=True, exist_ok=True)
        save_file(model.state_dict(), directory / "model.safetensors")
        model.config.to_json_file(directory / "config.json")  # written last: marks it complete
    return directory


def cloud_base_model_dir(model_name: str, directory: Path) -> Path:
    """A stand-in for `model_name`'s checkpoint: its config.json, and one safetensors file
    with an empty tensor under each weight name of its model.safetensors.index.json.

    Two small downloads instead of the whole model: `build_lora_adapter` reads only the
    config and the weight names, unless the model fuses projections the adapter trains
    separately (Nemotron, Qwen3.5), which Kimi K2.6 does not."""
    import torch
    from huggingface_hub import hf_hub_download
    from safetensors.torch import save_file

    if (directory / "config.json").exists():
        return directory
    staging = directory.with_name(directory.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    config = hf_hub_download(model_name, "config.json")
    index = json.loads(
        Path(hf_hub_download(model_name, "model.safetensors.index.json")).read_text()
    )
    names = {name: torch.empty(0) for name in index["weight_map"]}
    save_file(names, staging / "names.safetensors")
    shutil.copyfile(config, staging / "config.json")
    staging.rename(directory)
    return directory
