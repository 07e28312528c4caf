"""A scripted policy, served by the local Sail server for notebook 04.

The tiny local model knows arithmetic, not shell, so notebook 04's local policy picks one
of a few hand-written replies at random. It is served under its own model name through
the same Responses API as the real model, so the rollout code is the cloud code. The
replies travel in the request's metadata; the server tokenizes the chosen one with the
real Kimi K2.6 tokenizer and ends it with the first stop token. The logprobs are honest:
choosing one of n replies costs log(1/n), and every later token is certain.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence

SCRIPTED_MODEL_NAME = "course/scripted-shell-policy"
REPLIES_KEY = "scripted_replies"


def scripted_policy_metadata(replies: Sequence[str]) -> dict[str, str]:
    """The `metadata` for a `SailTokenCompleter` that samples one of `replies`."""
    return {REPLIES_KEY: json.dumps(list(replies))}


def scripted_completion(
    metadata: dict[str, str], stop: Sequence[int], max_tokens: int, rng: random.Random
) -> tuple[list[int], list[float], str]:
    """Pick a reply: its real Kimi token ids, their logprobs, and the stop reason."""
    from helpers.kimi import offline_kimi_tokenizer

    replies = json.loads(metadata.get(REPLIES_KEY, "null"))
    if not isinstance(replies, list) or not replies or not all(isinstance(r, str) for r in replies):
        raise ValueError(f"metadata.{REPLIES_KEY} must be a JSON list of reply strings")
    tokens = offline_kimi_tokenizer().encode(rng.choice(replies)) + list(stop[:1])
    logprobs = [-math.log(len(replies))] + [0.0] * (len(tokens) - 1)
    if len(tokens) > max_tokens:
        return tokens[:max_tokens], logprobs[:max_tokens], "length"
    return tokens, logprobs, "stop" if stop else "length"
