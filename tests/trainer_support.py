"""The local trainer on a tiny random Llama, for tests of its math against hand computations.

The base model is the same every time; the LoRA's B matrices start random (not zero), so
every adapter tensor gets a nonzero gradient from the first step.
"""

from __future__ import annotations

import peft
import torch
import transformers

from local_stack.engine.model import tiny_llama_config
from local_stack.engine.trainer import LoraTrainer
from local_stack.engine.vocab import CompactVocab

REAL_IDS = range(1000, 1040)  # the compact vocabulary's real ids; 5 is the unknown token


def tiny_trainer(
    target_modules: list[str], dtype: torch.dtype, lora_seed: int, b_seed: int, **kwargs
) -> LoraTrainer:
    """A rank-4 LoRA on `target_modules` of the tiny base model in `dtype`; `lora_seed` seeds
    the trainer's adapter, `b_seed` the random B matrices; `kwargs` go to `LoraTrainer`."""
    vocab = CompactVocab(REAL_IDS, unk_real_id=5)
    torch.manual_seed(0)
    config = tiny_llama_config(vocab.size)
    config.hidden_size, config.intermediate_size, config.num_attention_heads = 16, 32, 2
    config.num_key_value_heads = 2
    base = transformers.LlamaForCausalLM(config).to(dtype)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=target_modules)
    trainer = LoraTrainer(base, vocab, lora, seed=lora_seed, **kwargs)
    generator = torch.Generator().manual_seed(b_seed)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return trainer
