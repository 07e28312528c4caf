"""Telling a batch that lost a few rollouts from one that lost them all.

The training loop drops a failed rollout and carries on: right when a few fail, wrong when
all do (a parameter the service refuses, a service that is down). Then every group is
dropped, the step trains on nothing, the evaluation scores "0 samples", and the notebook
would finish as if it had worked. `CountingPolicy` wraps a policy, counts its answers and
failures, and lets the loop stop with one sentence that quotes the first failure.
"""

from __future__ import annotations

import asyncio
from typing import Any

import tinker
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs

from helpers.errors import CourseRunError

MAX_QUOTED_CHARS = 300  # of the first failure's message, on one line


class AllRolloutsFailedError(CourseRunError):
    """Not one rollout of a batch got an answer from the policy."""


class CountingPolicy(TokenCompleter):
    """Calls `policy` unchanged, counting answers and failures (a timeout is a failure)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.answered = 0
        self.failed = 0
        self.first_failure: BaseException | None = None

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        # As the cookbook's rollouts do: `max_tokens` only when a budget applies, so a policy
        # whose __call__ takes no such keyword still works.
        extra = {} if max_tokens is None else {"max_tokens": max_tokens}
        try:
            answer = await self.policy(model_input, stop, **extra)
        except BaseException as failure:  # re-raised: counted, never swallowed
            self.failed += 1
            self.first_failure = self.first_failure or failure
            raise
        self.answered += 1
        return answer

    def raise_if_all_failed(self) -> None:
        if self.answered or not self.failed:
            return
        failure = self.first_failure
        if isinstance(failure, asyncio.CancelledError):
            first = "it timed out"
        else:
            said = " ".join(str(failure).split())[:MAX_QUOTED_CHARS].rstrip(".")
            first = f"the first was {type(failure).__name__}: {said}"
        raise AllRolloutsFailedError(
            f"All {self.failed} rollouts failed, so there is nothing to train on or score; {first}."
        )
