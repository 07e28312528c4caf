"""What notebook 01's grader reports for one rollout (helpers/scoring.py): the reward of
each outcome and the metrics and logs the training loop and the evaluation read."""

from __future__ import annotations

import asyncio

import pytest

from helpers.scoring import MathEnv
from kimi import offline_kimi_tokenizer

END = "<|im_end|>"
QUESTION = "What is 7 plus 12?"


def step(renderer, completion: str):
    env = MathEnv(QUESTION, "7 + 12 = 19.", renderer)
    return asyncio.run(env.step(offline_kimi_tokenizer().encode(completion)))


@pytest.mark.parametrize(
    ("completion", "reward", "correct", "fmt"),
    [
        (rf"</think>So \boxed{{19}}{END}", 1.0, 1.0, 1.0),
        (rf"</think>So \boxed{{20}}{END}", 0.0, 0.0, 1.0),
        (f"</think>So 19{END}", -0.1, 0.0, 0.0),
        (rf"thinking \boxed{{19}}{END}", -0.1, 0.0, 0.0),  # never closed its thinking
        (rf"</think>So \boxed{{19}}<think>more{END}", -0.1, 0.0, 0.0),  # thinking again
        (r"</think>So \boxed{19}", -0.1, 0.0, 0.0),  # cut off before its stop token
        (rf"</think>So \boxed{{19}}{END}{END}", -0.1, 0.0, 0.0),  # two stop tokens
    ],
)
def test_each_outcome_reports_its_reward_metrics_and_question(
    renderer, completion, reward, correct, fmt
):
    result = step(renderer, completion)
    assert result.reward == pytest.approx(reward)
    assert result.metrics == {"correct": correct, "format": fmt}
    assert result.logs == {"question": QUESTION}
    assert result.episode_done is True
    assert result.next_observation.length == 0 and result.next_stop_condition == []


@pytest.mark.parametrize(
    ("correct", "fmt", "reward"),
    [(1.0, 1.0, 1.0), (1.0, 0.0, 0.9), (0.0, 1.0, 0.0), (0.0, 0.0, -0.1)],
)
def test_the_reward_is_correct_minus_a_tenth_for_a_bad_format(renderer, correct, fmt, reward):
    result = MathEnv(QUESTION, "19", renderer).scored(correct, fmt)
    assert result.reward == pytest.approx(reward)
    assert result.metrics == {"correct": correct, "format": fmt}
