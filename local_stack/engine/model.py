"""The tiny local stand-in for Kimi K2.6: a two-layer Llama over a compact Kimi vocabulary.

`scripts/build_tiny_base.py` trains its base weights, which ship with the course; the Sail
sampler and the Tinker trainer load them through `load_base_model` and apply LoRA adapters
built from `adapter_config_for`, so both sides of the stack agree on one architecture and
one config.
"""

from __future__ import annotations

import json
from pathlib import Path

import peft
import torch
import transformers
from safetensors.torch import load_file

from kimi import MODEL_NAME
from local_stack.engine.vocab import CompactVocab

BASE_MODEL_NAME = MODEL_NAME  # the name the stack serves its tiny model under
BASE_MODEL_DIR = Path(__file__).parent / "base_model"
WEIGHTS_PATH = BASE_MODEL_DIR / "model.safetensors"
VOCAB_PATH = BASE_MODEL_DIR / "vocab.json"
# Notebook 08's policy: a second tiny model, on Kimi K2.6 ids too, that writes shell
# (`scripts/build_tiny_shell_base.py`). Not a Kimi model, so it does not wear Kimi's name.
SHELL_MODEL_NAME = "course/tiny-shell"
# Every base model the stack serves, by name, as Tinker serves several: its build's directory.
BASE_MODEL_DIRS = {
    BASE_MODEL_NAME: BASE_MODEL_DIR,
    SHELL_MODEL_NAME: Path(__file__).parent / "shell_model",
}
# A build may pin its own architecture here (transformers' config.json); else tiny_llama_config.
ARCHITECTURE_FILE = "config.json"
ADAPTER_CONFIG_PATH = Path(__file__).resolve().parents[2] / "tinker_adapter_config.json"

# Longest prompt + completion the model serves; the sampler caps max_output_tokens to fit.
MAX_CONTEXT_TOKENS = 256


def tiny_llama_config(vocab_size: int) -> transformers.LlamaConfig:
    """The architecture. Untied embeddings: PEFT's merge of an lm_head LoRA is only exact then."""
    return transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_CONTEXT_TOKENS,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        attn_implementation="eager",
    )


def new_model(
    vocab_size: int, seed: int = 0, name: str = BASE_MODEL_NAME
) -> transformers.LlamaForCausalLM:
    """A randomly initialised fp32 model (the warm-up's starting point).

    It carries the course's model name, because PEFT copies `name_or_path` into every
    adapter's `base_model_name_or_path`, and the Sail side compares that with the request.
    """
    torch.manual_seed(seed)
    pinned = BASE_MODEL_DIRS.get(name, BASE_MODEL_DIR) / ARCHITECTURE_FILE
    config = tiny_llama_config(vocab_size)
    if pinned.exists():  # eager attention, as tiny_llama_config: the json does not keep it
        saved = json.loads(pinned.read_text())
        config = transformers.LlamaConfig(**saved | {"attn_implementation": "eager"})
    model = transformers.LlamaForCausalLM(config).float()
    model.name_or_path = name
    return model


def load_base_model(
    name: str = BASE_MODEL_NAME,
) -> tuple[transformers.LlamaForCausalLM, CompactVocab]:
    """A fresh fp32 copy of base model `name` in eval mode, and its vocabulary.

    Fresh on every call because callers wrap it with PEFT, which mutates the module tree.
    """
    if name not in BASE_MODEL_DIRS:
        raise ValueError(f"no base model {name!r:.80}; the local stack has {list(BASE_MODEL_DIRS)}")
    weights_path = BASE_MODEL_DIRS[name] / WEIGHTS_PATH.name
    if not weights_path.exists():
        raise FileNotFoundError(f"{weights_path} missing: run its build in scripts/")
    vocab = CompactVocab.load(BASE_MODEL_DIRS[name] / VOCAB_PATH.name)
    model = new_model(vocab.size, name=name)
    state = {key: tensor.float() for key, tensor in load_file(weights_path).items()}
    model.load_state_dict(state, strict=True)
    return model.eval(), vocab


def adapter_config_for(rank: int, base_model: str = BASE_MODEL_NAME) -> peft.LoraConfig:
    """The LoRA config the whole stack uses: the course's adapter config at rank `rank`."""
    course = json.loads(ADAPTER_CONFIG_PATH.read_text())
    return peft.LoraConfig(
        r=rank,
        lora_alpha=course["lora_alpha"],
        target_modules=list(course["target_modules"]),
        lora_dropout=0.0,
        bias=course.get("bias", "none"),
        task_type=course.get("task_type", "CAUSAL_LM"),
        base_model_name_or_path=base_model,
    )
