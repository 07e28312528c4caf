"""Only an answer after a closed `</think>`, in a completion that stopped cleanly, is graded.

Issue 26's three completions, scored by the guide's grader (kept as `GuideMathEnv`) and by
the course's `MathEnv`; then the same rule for notebook 08's bash block, run in real local
sandboxes.
"""

from __future__ import annotations

import asyncio

import pytest
from sandbox_probes import TASK_DIR, run
from tinker_cookbook.rl.rollouts import do_group_rollout

from helpers.scoring import GuideMathEnv, MathEnv, MathGroupBuilder, graded_text
from kimi import MODEL_NAME, RENDERER_NAME, offline_kimi_tokenizer, register_offline_kimi_tokenizer
from local_stack.client.sailbox import local_sandbox_factory
from shell_tasks.shell_env import ShellTaskGroupBuilder
from tests.replies_support import Replies, in_reply_order

END = "<|im_end|>"
QUESTION, REFERENCE = "What is 12 plus 2?", "12 + 2 = 14."
NEVER_CLOSED = rf"12 + 2 = 14 so \boxed{{14}}{END}"
CUT_OFF = r"12 + 2 = 14 so \boxed{14} hmm let me"
CLOSED = rf"12 + 2 = 14</think>The answer is \boxed{{14}}.{END}"


def scored(grader: type[MathEnv], renderer, completion: str) -> tuple[float, dict]:
    env = grader(QUESTION, REFERENCE, renderer)
    result = asyncio.run(env.step(offline_kimi_tokenizer().encode(completion)))
    return round(result.reward, 6), result.metrics


@pytest.mark.parametrize(
    ("completion", "guide", "fixed"),
    [
        (NEVER_CLOSED, (1.0, 1.0, 1.0), (-0.1, 0.0, 0.0)),
        (CUT_OFF, (0.9, 1.0, 0.0), (-0.1, 0.0, 0.0)),
        (CLOSED, (1.0, 1.0, 1.0), (1.0, 1.0, 1.0)),
    ],
    ids=["thinking never closed", "cut off inside the thinking", "closed, then answered"],
)
def test_issue_26_rows(renderer, completion: str, guide: tuple, fixed: tuple) -> None:
    """(reward, correct, format) under the guide's grader, as the issue measured it, and
    under the fixed one: no correct credit unless the thinking closed and the stop came."""
    for grader, expected in ((GuideMathEnv, guide), (MathEnv, fixed)):
        reward, metrics = scored(grader, renderer, completion)
        assert (reward, metrics["correct"], metrics["format"]) == expected, grader.__name__


@pytest.mark.parametrize(
    ("completion", "answer"),
    [
        (rf"think</think>\boxed{{14}}{END}", r"\boxed{14}"),
        (rf"</think>\boxed{{14}}{END}", r"\boxed{14}"),  # an empty thinking block still closes
        (rf"a</think>b</think>\boxed{{14}}{END}", r"\boxed{14}"),  # after the last close
        (rf"a</think>b<think>\boxed{{14}}{END}", None),  # a new thinking block never closed
        (rf"<think>\boxed{{14}}{END}", None),
        (r"a</think>\boxed{14}", None),  # no stop token: cut off
        (rf"a{END}</think>\boxed{{14}}", None),  # nothing after the stop token counts
        (rf"a</think>\boxed{{14}}{END}{END}", None),  # two stop tokens: unparseable
    ],
)
def test_graded_text_is_the_answer_after_closed_thinking(renderer, completion, answer) -> None:
    assert graded_text(renderer, offline_kimi_tokenizer().encode(completion)) == answer


def test_the_group_builder_takes_either_grader(renderer) -> None:
    row = {"question": QUESTION, "answer": REFERENCE}
    for grader in (MathEnv, GuideMathEnv):
        builder = MathGroupBuilder(row=row, renderer=renderer, group_size=2, grader=grader)
        envs = asyncio.run(builder.make_envs())
        assert [type(env) for env in envs] == [grader, grader]
        rewards = [
            asyncio.run(env.step(offline_kimi_tokenizer().encode(NEVER_CLOSED))).reward
            for env in envs
        ]
        assert rewards == ([1.0, 1.0] if grader is GuideMathEnv else [-0.1, -0.1])


# -- notebook 08: the bash block, by the same rule ------------------------------------------

SCRIPT = "```bash\nawk '{ s += $1 } END { print s }' numbers.txt > sum.txt\n```"
BASH_REPLIES = {
    "thinking never closed": f"Add them with awk. {SCRIPT}{END}",
    "cut off inside the thinking": f"Add them with awk. {SCRIPT} hmm let me",
    "closed, then answered": f"Add them with awk.</think>{SCRIPT}{END}",
}


def test_the_bash_block_runs_only_after_closed_thinking_and_a_clean_stop() -> None:
    """The same correct script three ways: only the reply that closed its thinking and
    stopped runs it and earns the task's reward; the others run nothing and earn 0."""
    register_offline_kimi_tokenizer()
    builder = ShellTaskGroupBuilder(
        task_dir=TASK_DIR,
        sandbox_factory=local_sandbox_factory,
        group_size=len(BASH_REPLIES),
        model_name=MODEL_NAME,
        renderer_name=RENDERER_NAME,
        sandbox_creation="concurrent",
    )
    replies = list(BASH_REPLIES.values())
    group = run(do_group_rollout(builder, Replies(replies)))
    outcome = {
        name: (
            t.transitions[0].metrics["has_bash_block"],
            "script" in t.transitions[0].logs,
            reward,
        )
        for name, (t, reward) in zip(BASH_REPLIES, in_reply_order(group, replies), strict=True)
    }
    assert outcome == {
        "thinking never closed": (0.0, False, 0.0),
        "cut off inside the thinking": (0.0, False, 0.0),
        "closed, then answered": (1.0, True, 1.0),
    }
