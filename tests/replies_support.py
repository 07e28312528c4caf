"""Scripted replies for rollouts under test: a completer that answers with fixed texts (real
Kimi ids), and a group's outcome read back in the order of those texts."""

from __future__ import annotations

import tinker
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup

from kimi import offline_kimi_tokenizer


class Replies(TokenCompleter):
    """Answers each prompt with the next of a fixed list of replies (not a sampler)."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = [offline_kimi_tokenizer().encode(text) for text in replies]

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        tokens = self.replies.pop(0)
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens))


def in_reply_order(group: TrajectoryGroup, replies: list[str]) -> list[tuple[Trajectory, float]]:
    """Each reply's trajectory and total reward, in the order of `replies`: concurrent envs
    take their replies in whatever order they ask, so the group's own order is not it."""
    by_tokens = {
        tuple(t.transitions[0].ac.tokens): (t, reward)
        for t, reward in zip(group.trajectories_G, group.get_total_rewards(), strict=True)
    }
    return [by_tokens[tuple(offline_kimi_tokenizer().encode(text))] for text in replies]
