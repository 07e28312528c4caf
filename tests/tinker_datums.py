"""Datums for tests that train through the real tinker SDK, over the local vocabulary."""

from __future__ import annotations

import numpy as np
from tinker import types

from local_stack.engine.model import VOCAB_PATH
from local_stack.engine.vocab import CompactVocab

MODEL = "moonshotai/Kimi-K2.6"


def rl_datum(n_prompt: int = 6, n_completion: int = 5, seed: int = 0) -> types.Datum:
    """An importance_sampling datum: random known tokens, advantages on the completion only."""
    real_ids = CompactVocab.load(VOCAB_PATH).real_ids[1:]  # index 0 is the unknown token
    rng = np.random.default_rng(seed)
    tokens = rng.choice(real_ids, size=n_prompt + n_completion).tolist()
    length = len(tokens) - 1
    advantages = np.zeros(length, np.float32)
    advantages[n_prompt - 1 :] = rng.normal(size=n_completion)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={
            "target_tokens": np.array(tokens[1:], np.int64),
            "logprobs": np.full(length, -3.0, np.float32),
            "advantages": advantages,
        },
    )
