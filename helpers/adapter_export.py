"""Notebook 09's export: how big a Tinker archive and its PEFT export are before anything is
downloaded, room on disk and in memory for the conversion, and the base-model directory
`tinker_cookbook.weights.build_lora_adapter` converts against.

The converter reads the base model's `config.json` and its weight names, never a weight, so
in the cloud a stand-in directory of those two replaces Kimi K2.6's ~600 GB checkpoint. For a
mixture-of-experts model the export is much larger than the archive, since the converter
copies the factor Tinker shares between experts into each; `kimi.converter` counts it.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.errors import CourseConfigError
from kimi.architecture import KIMI_K26, MoeArchitecture
from kimi.converter import converter_export

BF16_BYTES = 2
# A little more than the files for the file system, and in memory for Python and the SDKs.
DISK_SLACK = 1.1
MEMORY_SLACK = 1.1


@dataclass(frozen=True)
class ArchiveEstimate:
    """LoRA parameters of an adapter, the bytes of its Tinker archive and of its PEFT export,
    and the bytes the conversion holds in memory at its peak."""

    parameters: int
    archive_bytes: int
    how: str  # one sentence: what the figure assumes
    export_bytes: int = 0  # 0: the same as the archive (a dense model)
    conversion_memory_bytes: int = 0  # 0: the archive's bytes (nothing copied)

    def __post_init__(self) -> None:
        object.__setattr__(self, "export_bytes", self.export_bytes or self.archive_bytes)
        memory = self.conversion_memory_bytes or self.archive_bytes
        object.__setattr__(self, "conversion_memory_bytes", memory)

    @property
    def disk_bytes(self) -> int:
        """The most on disk at once: the archive and its unpacked files (the archive is then
        deleted), later the unpacked files and the export."""
        peak = max(2 * self.archive_bytes, self.archive_bytes + self.export_bytes)
        return int(peak * DISK_SLACK)

    @property
    def memory_bytes(self) -> int:
        return int(self.conversion_memory_bytes * MEMORY_SLACK)


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


def estimate_moe(arch: MoeArchitecture, rank: int, bytes_per_parameter: int) -> ArchiveEstimate:
    """An archive of `arch` at `rank` and its export. The conversion holds the whole archive
    in memory, then every tensor it copies, then writes the export from memory."""
    counted = converter_export(arch, rank)
    return ArchiveEstimate(
        parameters=counted.archive,
        archive_bytes=counted.archive * bytes_per_parameter,
        how="",
        export_bytes=counted.export * bytes_per_parameter,
        conversion_memory_bytes=(counted.archive + counted.copied) * bytes_per_parameter,
    )


def estimate_kimi_k26(rank: int) -> ArchiveEstimate:
    """Kimi K2.6 with LoRA on every layer Tinker adapts (MLP, attention, unembedding), in bf16.

    The archive's parameters are the cookbook's `get_lora_param_count` (a test holds them
    equal): routed experts share their hidden-side factor, and attention adapts `q_a_proj`,
    `kv_a_proj_with_mqa` and `o_proj`. The export's are the converter's own count. Every Kimi
    adapter size the course states comes from here. Assumed, not documented: bf16."""
    how = (
        "Tinker's LoRA shapes for Kimi K2.6 as the cookbook counts them, in bf16; "
        "Tinker's archive format and dtype are not documented"
    )
    return dataclasses.replace(estimate_moe(KIMI_K26, rank, BF16_BYTES), how=how)


def check_free_disk(directory: Path, estimate: ArchiveEstimate) -> int:
    """Free bytes where `directory` lives; refuses in one sentence if the export won't fit."""
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if free < estimate.disk_bytes:
        raise CourseConfigError(
            f"{directory} has {free / 1e9:.1f} GB free, but downloading and unpacking a "
            f"{estimate.archive_bytes / 1e9:.1f} GB archive and converting it into a "
            f"{estimate.export_bytes / 1e9:.1f} GB export needs about "
            f"{estimate.disk_bytes / 1e9:.1f} GB: free some space, or set COURSE_RUNS_DIR "
            "to a disk that has it."
        )
    return free


def available_memory() -> int:
    """Bytes of memory this machine can give a process now without swapping."""
    import psutil

    return psutil.virtual_memory().available


def check_free_memory(estimate: ArchiveEstimate, available: int | None = None) -> int:
    """Available memory; refuses in one sentence if the conversion would not fit in it."""
    available = available_memory() if available is None else available
    if available < estimate.memory_bytes:
        raise CourseConfigError(
            f"this machine has {available / 1e9:.1f} GB of memory available, but converting "
            f"a {estimate.archive_bytes / 1e9:.1f} GB archive holds about "
            f"{estimate.memory_bytes / 1e9:.1f} GB at once (the converter loads the whole "
            "archive and copies each expert's shared factor): convert on a machine with that "
            "much memory, or sample from the Tinker checkpoint without converting it."
        )
    return available


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
