"""A scripted policy for notebook 08: a stand-in for a model that writes shell scripts.

The tiny local model knows arithmetic, not shell, so on the local backend notebook 08's
policy picks one of a few hand-written replies at random. It is a `TokenCompleter`, the
interface the cookbook's rollouts sample from, and runs in the notebook's own process: no
server is involved. Its tokens are real Kimi K2.6 ids from the course's tokenizer, and its
logprobs are honest: it is a uniform mixture of the replies, so each token's logprob is
the log of the share of the replies still possible that continue with that token (a token
all remaining replies share costs nothing; the sequence as a whole costs log(1/n)).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import tinker
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs


class ScriptedShellPolicy(TokenCompleter):
    """Answers every prompt with one of `replies`, chosen uniformly at random, then a stop token.

    `tokenizer` is the course's (`course.tokenizer`); the stop token is the first one of
    the renderer's stop condition. `seed` makes the choices repeatable.
    """

    def __init__(self, replies: Sequence[str], tokenizer: Any, seed: int | None = None) -> None:
        if isinstance(replies, str) or not replies or not all(isinstance(r, str) for r in replies):
            raise ValueError("replies must be a non-empty list of reply strings")
        self._tokenizer = tokenizer
        self._replies_R = [tokenizer.encode(reply, add_special_tokens=False) for reply in replies]
        self._rng = random.Random(seed)
        self._seed = seed

    def __repr__(self) -> str:
        return f"ScriptedShellPolicy({len(self._replies_R)} replies, seed={self._seed})"

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        del model_input  # a script does not read its prompt
        stop_tokens = self._stop_tokens(stop)
        candidates_R = [reply + stop_tokens for reply in self._replies_R]
        tokens = self._rng.choice(candidates_R)
        logprobs = _mixture_logprobs(tokens, candidates_R)
        if max_tokens is not None and len(tokens) > max_tokens:
            return TokensWithLogprobs(tokens[:max_tokens], logprobs[:max_tokens], "length")
        return TokensWithLogprobs(tokens, logprobs, "stop" if stop_tokens else "length")

    def _stop_tokens(self, stop: StopCondition) -> list[int]:
        if not stop:
            return []
        first = stop[0]
        return [first] if isinstance(first, int) else self._tokenizer.encode(first)


def _mixture_logprobs(tokens: list[int], candidates_R: list[list[int]]) -> list[float]:
    """log P(token | earlier tokens) under a uniform choice among `candidates_R`."""
    logprobs = []
    possible = candidates_R
    for position, token in enumerate(tokens):
        continuing = [c for c in possible if len(c) > position and c[position] == token]
        logprobs.append(math.log(len(continuing) / len(possible)))
        possible = continuing
    return logprobs
