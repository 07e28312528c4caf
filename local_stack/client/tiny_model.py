"""The tiny model as a kernel may use it: its shipped weights and its LoRA config, read from
disk with no server, e.g. to count LoRA parameters or load a downloaded adapter with `peft`,
or to name a Tinker adapter archive in a raw Sail request.

The server's engine builds both (`local_stack.engine.model`); this is the one door to them
from outside the stack, so that the engine can change without the course noticing.
"""

from __future__ import annotations

import json
from pathlib import Path

import peft
import transformers

from local_stack.engine import model
from local_stack.engine.vocab import CompactVocab


def tiny_base_model() -> tuple[transformers.LlamaForCausalLM, CompactVocab]:
    """A fresh fp32 copy of the tiny base model in eval mode, and its vocabulary."""
    return model.load_base_model()


def tiny_lora_config(rank: int) -> peft.LoraConfig:
    """The `peft.LoraConfig` the stack trains `tiny_base_model()` with, at `rank`."""
    return model.adapter_config_for(rank)


def local_base_model_dir(directory: Path) -> Path:
    """The tiny base model saved as a Hugging Face model directory (config.json + weights)."""
    from safetensors.torch import save_file

    if not (directory / "config.json").exists():
        base, _ = tiny_base_model()
        directory.mkdir(parents=True, exist_ok=True)
        save_file(base.state_dict(), directory / "model.safetensors")
        base.config.to_json_file(directory / "config.json")  # written last: marks it complete
    return directory


def sail_lora_metadata(url: str, rank: int) -> dict[str, str]:
    """A Sail request's metadata for sampling from the Tinker adapter archive at `url`: the
    URL, and the course's adapter config at `rank` as JSON, as the sail SDK sends them."""
    config = {**json.loads(model.ADAPTER_CONFIG_PATH.read_text()), "r": rank}
    return {"lora": url, "tinker_adapter_config": json.dumps(config, sort_keys=True)}
