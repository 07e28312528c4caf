"""Notebook 08's scripted shell policy: real Kimi tokens, honest logprobs, no server."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import tinker
from sandbox_probes import run

from kimi import offline_kimi_tokenizer
from shell_tasks.scripted_policy import ScriptedShellPolicy

STOP = [163586]  # <|im_end|>, the kimi_k26 renderer's stop condition
REPLIES = [
    "</think>```bash\necho 1 > sum.txt\n```",
    "</think>```bash\necho 2 > sum.txt\n```",
    "</think>No script.",
    "</think>No script.",  # a reply listed twice is twice as likely
]
PROMPT = tinker.ModelInput.from_ints([1, 2, 3])


def _sample(policy: ScriptedShellPolicy, times: int, **kwargs):
    async def sample_all():
        return [await policy(PROMPT, STOP, **kwargs) for _ in range(times)]

    return run(sample_all())


def test_a_reply_is_its_real_tokens_then_the_stop_token() -> None:
    tokenizer = offline_kimi_tokenizer()
    policy = ScriptedShellPolicy(REPLIES[:1], tokenizer)
    (sample,) = _sample(policy, 1)
    assert sample.tokens == tokenizer.encode(REPLIES[0]) + STOP
    assert sample.stop_reason == "stop"
    assert sample.logprobs == [0.0] * len(sample.tokens)  # one reply: every token is certain


def test_logprobs_are_those_of_a_uniform_choice_among_the_replies() -> None:
    tokenizer = offline_kimi_tokenizer()
    samples = _sample(ScriptedShellPolicy(REPLIES, tokenizer, seed=0), 200)
    by_reply = {tokenizer.decode(s.tokens[:-1]): s for s in samples}
    assert set(by_reply) == set(REPLIES)
    for reply, sample in by_reply.items():
        share = REPLIES.count(reply) / len(REPLIES)
        assert math.isclose(sum(sample.logprobs), math.log(share))
        # "</think>" opens every reply, so choosing it costs nothing.
        assert sample.logprobs[0] == 0.0
    counts = Counter(tokenizer.decode(s.tokens[:-1]) for s in samples)
    assert counts["</think>No script."] > counts["</think>```bash\necho 1 > sum.txt\n```"]


def test_the_seed_repeats_the_choices_and_max_tokens_cuts_the_reply() -> None:
    tokenizer = offline_kimi_tokenizer()
    first = [s.tokens for s in _sample(ScriptedShellPolicy(REPLIES, tokenizer, seed=7), 20)]
    again = [s.tokens for s in _sample(ScriptedShellPolicy(REPLIES, tokenizer, seed=7), 20)]
    assert first == again
    (cut,) = _sample(ScriptedShellPolicy(REPLIES[:1], tokenizer), 1, max_tokens=3)
    assert len(cut.tokens) == len(cut.logprobs) == 3 and cut.stop_reason == "length"


def test_a_string_stop_sequence_is_tokenized() -> None:
    tokenizer = offline_kimi_tokenizer()
    policy = ScriptedShellPolicy(REPLIES[:1], tokenizer)
    sample = run(policy(PROMPT, ["<|im_end|>"]))
    assert sample.tokens[-1:] == STOP


@pytest.mark.parametrize("replies", [[], "one reply", [1, 2], None])
def test_replies_must_be_a_non_empty_list_of_strings(replies) -> None:
    with pytest.raises(ValueError, match="replies must be a non-empty list"):
        ScriptedShellPolicy(replies, offline_kimi_tokenizer())
