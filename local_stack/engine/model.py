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


def new_model(vocab_size: int, seed: int = 0) -> transformers.LlamaForCausalLM:
    """A randomly initialised fp32 model (the warm-up's starting point).

    It carries the course's model name, because PEFT copies `name_or_path` into every
    adapter's `base_model_name_or_path`, and the Sail side compares that with the request.
    """
    torch.manual_seed(seed)
    model = transformers.LlamaForCausalLM(tiny_llama_config(vocab_size)).float()
    model.name_or_path = BASE_MODEL_NAME
    return model


def load_base_model() -> tuple[transformers.LlamaForCausalLM, CompactVocab]:
    """A fresh fp32 copy of the base model in eval mode, and its vocabulary.

    Fresh on every call because callers wrap it with PEFT, which mutates the module tree.
    """
    if not WEIGHTS_PATH.exists():
        raise FileNotFoundError(f"{WEIGHTS_PATH} missing: run `python scripts/build_tiny_base.py`")
    vocab = CompactVocab.load(VOCAB_PATH)
    model = new_model(vocab.size)
    state = {name: tensor.float() for name, tensor in load_file(WEIGHTS_PATH).items()}
    model.load_state_dict(state, strict=True)
    return model.eval(), vocab


def adapter_config_for(rank: int) -> peft.LoraConfig:
    """The LoRA config the whole stack uses: the course's adapter config at rank `rank`."""
    course = json.loads(ADAPTER_CONFIG_PATH.read_text())
    return peft.LoraConfig(
        r=rank,
        lora_alpha=course["lora_alpha"],
        target_modules=list(course["target_modules"]),
        lora_dropout=0.0,
        bias=course.get("bias", "none"),
        task_type=course.get("task_type", "CAUSAL_LM"),
        base_model_name_or_path=BASE_MODEL_NAME,
    )
