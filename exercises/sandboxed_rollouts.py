"""Notebook 08's exercises: the sandboxed environment's step, written by the learner. First the
rule that finds the script in a completion, then the step that runs it in the policy's
sandbox and grades it where the policy cannot reach."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from exercises.check import Case, Exercise, Mistake, same
from shell_tasks.harbor_task import (
    GradingFactory,
    HarborTaskDir,
    Verdict,
    grade_in_fresh_sandbox,
    load_harbor_task,
    run_verifier,
)
from shell_tasks.shell_env import bash_script, run_and_grade, upload_task_inputs
from shell_tasks.tamper import RIGHT_ANSWER, STRATEGIES, TAMPER_TASK_DIR

# -- the script in a completion ------------------------------------------------------------

AWK = "awk '{s += $1} END {print s}' numbers.txt > sum.txt\n"
WRONG = "echo 0 > sum.txt\n"
DRAFT = "echo 1 > sum.txt\n"
_ANY_FENCE = re.compile(r"```[\w-]*[ \t]*\n(.*?)```", re.DOTALL)
_BASH_FENCE = re.compile(r"```(?:bash|sh)[ \t]*\n(.*?)```", re.DOTALL)


def _script_cases() -> list[Case]:
    def completion(text: str, stopped: bool = True) -> tuple[str, bool]:
        return (text, stopped)

    return [
        Case(
            "thinking, then one bash block",
            completion(f"Add them up.</think>Sum the lines.\n```bash\n{AWK}```"),
        ),
        Case(
            "a draft block in the thinking, the answer's block after it",
            completion(f"Maybe ```bash\n{WRONG}``` no.</think>```bash\n{AWK}```"),
        ),
        Case("still thinking: no </think>", completion(f"I could run ```bash\n{WRONG}``` but")),
        Case(
            "two blocks in the answer",
            completion(f"</think>```bash\n{AWK}```\nor else\n```bash\n{WRONG}```"),
        ),
        Case(
            "cut off at max_tokens after a whole block",
            completion(f"</think>```bash\n{AWK}```\nThis writes", stopped=False),
        ),
        Case(
            "a python block, then a bash block",
            completion(
                "</think>```python\nprint(sum(map(int, open('numbers.txt'))))\n```\n"
                f"```bash\n{AWK}```"
            ),
        ),
        Case(
            "thinking closed twice, a block between the two",
            completion(
                f"Maybe ```bash\n{WRONG}```</think>```bash\n{DRAFT}```\nNo.</think>"
                f"```bash\n{AWK}```"
            ),
        ),
        Case("an sh block", completion(f"</think>```sh\n{AWK}```")),
        Case("no block at all", completion("</think>The sum is probably 1000.")),
        Case(
            "a new <think> opened after the answer",
            completion(f"Draft ```bash\n{WRONG}```</think>```bash\n{AWK}```<think>Wait, check"),
        ),
    ]


def _first_fence(pattern: re.Pattern[str], text: str) -> str | None:
    match = pattern.search(text)
    return match.group(1) if match else None


def _answer(completion: str) -> str | None:
    _, closed, answer = completion.rpartition("</think>")
    return answer if closed and "<think>" not in answer else None


def _reopened_thinking_kept(completion: str, stopped: bool) -> str | None:
    _, closed, answer = completion.rpartition("</think>")
    return _first_fence(_BASH_FENCE, answer) if stopped and closed else None


def _thinking_searched(completion: str, stopped: bool) -> str | None:
    return _first_fence(_BASH_FENCE, completion) if stopped else None


def _last_block(completion: str, stopped: bool) -> str | None:
    answer = _answer(completion) if stopped else None
    blocks = _BASH_FENCE.findall(answer or "")
    return blocks[-1] if blocks else None


def _cut_off_accepted(completion: str, stopped: bool) -> str | None:
    answer = _answer(completion)
    return None if answer is None else _first_fence(_BASH_FENCE, answer)


def _any_language(completion: str, stopped: bool) -> str | None:
    answer = _answer(completion) if stopped else None
    return None if answer is None else _first_fence(_ANY_FENCE, answer)


def _first_close(completion: str, stopped: bool) -> str | None:
    thinking, closed, answer = completion.partition("</think>")
    if not (stopped and closed) or "<think>" in answer:
        return None
    return _first_fence(_BASH_FENCE, answer)


def _bash_only(completion: str, stopped: bool) -> str | None:
    answer = _answer(completion) if stopped else None
    return (
        None
        if answer is None
        else _first_fence(re.compile(r"```bash[ \t]*\n(.*?)```", re.DOTALL), answer)
    )


def _stripped(completion: str, stopped: bool) -> str | None:
    script = bash_script(completion, stopped)
    return None if script is None else script.strip()


SCRIPT = Exercise(
    name="bash_script",
    notebook="08_sandboxed_rollouts",
    minutes=10,
    reference=bash_script,
    cases=_script_cases,
    mistakes=[
        Mistake(
            "a block taken from inside the thinking",
            "you took a block from the thinking. Only the answer runs: the text after the "
            "last `</think>`; a completion that never closed its thinking runs nothing.",
            _thinking_searched,
        ),
        Mistake(
            "the last block instead of the first",
            "you ran the last bash block of the answer; the rule (and the system prompt's "
            "'exactly one block') runs the first one.",
            _last_block,
        ),
        Mistake(
            "a cut-off completion accepted",
            "the completion was cut off at max_tokens (`stopped` is False): nothing it wrote "
            "counts, even a whole block before the cut. Return None.",
            _cut_off_accepted,
        ),
        Mistake(
            "the fence's language tag ignored",
            "you ran a block fenced as another language. Only ```bash or ```sh blocks are "
            "scripts; a ```python block is not run by bash.",
            _any_language,
        ),
        Mistake(
            "a new `<think>` after the answer not checked",
            "the completion opened a new `<think>` after its answer, so it is thinking again: "
            "by the grader's rule it has no answer to run (None), as in notebook 01.",
            _reopened_thinking_kept,
        ),
        Mistake(
            "the answer taken after the first `</think>`",
            "you split at the first `</think>`. A completion can close its thinking more than "
            "once, and the answer is what follows the last one (as the grader of notebook 01 "
            "reads it): use rpartition, or the text after the last `</think>`.",
            _first_close,
        ),
        Mistake(
            "```sh blocks left out",
            "you ran only ```bash blocks. A ```sh block is a script too: accept both tags.",
            _bash_only,
        ),
        Mistake(
            "the script stripped",
            "you stripped the block's whitespace. bash would run it the same, but the rule "
            "returns the lines between the fences exactly as the model wrote them, the last "
            "newline kept, so that the script the run logs is the model's: drop the .strip().",
            _stripped,
        ),
    ],
)

# -- the step: run in the policy's sandbox, grade in a fresh one ---------------------------

# (label, script, timeout in seconds). Each script writes sum.txt afresh, so the learner's
# run, the reference's and a mistake's can share a case's sandbox and still answer alike.
_STEP_CASES = [
    ("a right answer", RIGHT_ANSWER, 20),
    ("a wrong answer that exits 0", "wc -l < /app/numbers.txt > /app/sum.txt", 20),
    ("a right answer, then exit 1", f"{RIGHT_ANSWER}; exit 1", 20),
    ("no bash block (None)", None, 20),
    (
        "a wrong answer, and a ~/.profile line that rewrites the tests",
        f"echo 0 > /app/sum.txt\n{STRATEGIES['.profile']}",
        20,
    ),
    ("a right answer too slow for its 2 s", f"rm -f /app/sum.txt; sleep 5; {RIGHT_ANSWER}", 2),
    ("a right answer, then a sleep past its 4 s", f"{RIGHT_ANSWER}; sleep 10", 4),
]


async def _policy_sandboxes(
    task: HarborTaskDir, sandbox_factory: GradingFactory, sandboxes: list[Any]
) -> None:
    """Add to `sandboxes` one sandbox per case, holding the task's inputs (appended one by
    one, so the caller can clean up whatever was made)."""
    for _ in _STEP_CASES:
        sandboxes.append(await sandbox_factory(task.environment_dir, 600))
        await upload_task_inputs(sandboxes[-1], task)


@asynccontextmanager
async def step_context(sandbox_factory: GradingFactory) -> AsyncIterator[dict[str, Any]]:
    """What the step's check needs: the task, the factory, and a policy sandbox per case,
    all cleaned up when the block ends."""
    task = load_harbor_task(TAMPER_TASK_DIR)
    sandboxes: list[Any] = []
    try:
        await _policy_sandboxes(task, sandbox_factory, sandboxes)
        yield {"task": task, "sandbox_factory": sandbox_factory, "sandboxes": sandboxes}
    finally:
        for sandbox in sandboxes:
            await sandbox.cleanup()


def _step_cases(
    task: HarborTaskDir, sandbox_factory: GradingFactory, sandboxes: Sequence[Any]
) -> list[Case]:
    return [
        Case(label, (script, sandbox, task, sandbox_factory, timeout))
        for (label, script, timeout), sandbox in zip(_STEP_CASES, sandboxes, strict=True)
    ]


async def _local_step_context() -> dict[str, Any]:
    """The tests' context, on local sandboxes. A test's context has no end to clean up at:
    each local sandbox releases its enclosure when it is collected."""
    from shell_tasks.sandboxes import sandbox_factory

    factory: Any = sandbox_factory("local")
    task = load_harbor_task(TAMPER_TASK_DIR)
    sandboxes: list[Any] = []
    await _policy_sandboxes(task, factory, sandboxes)
    return {"task": task, "sandbox_factory": factory, "sandboxes": sandboxes}


def _same_reward(got: Any, expected: Verdict) -> bool:
    return isinstance(got, Verdict) and same(got.reward, expected.reward)


async def _graded_in_own_sandbox(script, sandbox, task, sandbox_factory, timeout_seconds):
    if script is not None:
        ran = await sandbox.run_command(script, workdir=task.workdir, timeout=timeout_seconds)
        if ran.metrics.get("timed_out"):
            return Verdict(0.0)
    return await run_verifier(sandbox, task, timeout_seconds)


async def _exit_code_as_reward(script, sandbox, task, sandbox_factory, timeout_seconds):
    if script is None:
        return Verdict(0.0)
    ran = await sandbox.run_command(script, workdir=task.workdir, timeout=timeout_seconds)
    return Verdict(float(ran.exit_code == 0))


async def _failure_withheld(script, sandbox, task, sandbox_factory, timeout_seconds):
    if script is None:
        return Verdict(0.0)
    ran = await sandbox.run_command(script, workdir=task.workdir, timeout=timeout_seconds)
    if ran.exit_code != 0:
        return Verdict(0.0)
    return await grade_in_fresh_sandbox(sandbox, task, sandbox_factory, timeout_seconds)


async def _timed_out_graded(script, sandbox, task, sandbox_factory, timeout_seconds):
    if script is not None:
        await sandbox.run_command(script, workdir=task.workdir, timeout=timeout_seconds)
    return await grade_in_fresh_sandbox(sandbox, task, sandbox_factory, timeout_seconds)


async def _no_timeout(script, sandbox, task, sandbox_factory, timeout_seconds):
    if script is not None:
        ran = await sandbox.run_command(script, workdir=task.workdir)  # the default: 60 s
        if ran.metrics.get("timed_out"):
            return Verdict(0.0)
    return await grade_in_fresh_sandbox(sandbox, task, sandbox_factory, timeout_seconds)


STEP = Exercise(
    name="run_and_grade",
    notebook="08_sandboxed_rollouts",
    minutes=10,
    reference=run_and_grade,
    cases=_step_cases,
    same=_same_reward,
    mistakes=[
        # In this order: a mistake's hint goes to the first mistake that answers alike.
        Mistake(
            "graded in the policy's own sandbox",
            "you graded in the policy's own sandbox (`run_verifier`), where its script left a "
            "line in ~/.profile that rewrote the tests as they ran. Grade with "
            "`grade_in_fresh_sandbox`, which copies only the answer file to a new sandbox.",
            _graded_in_own_sandbox,
        ),
        Mistake(
            "a failing exit code withheld the grade",
            "you gave a script that exited non-zero `Verdict(0.0)` without grading it. Its "
            "exit code says nothing about its answer: this one wrote the right sum, then "
            "exited 1. Only a timeout skips grading; grade everything else.",
            _failure_withheld,
        ),
        Mistake(
            "the script's exit code taken as the reward",
            "you rewarded the script's exit code. A script can exit 0 and write a wrong "
            "answer: the task's tests decide the reward (`grade_in_fresh_sandbox`).",
            _exit_code_as_reward,
        ),
        Mistake(
            "a timed-out run graded",
            "the script ran past its timeout (exit code 124, `timed_out` in the result's "
            "metrics) and you still graded what it left. A script that did not finish in "
            "time earns `Verdict(0.0)`, ungraded.",
            _timed_out_graded,
        ),
        Mistake(
            "no timeout",
            "you ran the script without `timeout=timeout_seconds`, so the sandbox's default "
            "(60 s) let a slow script finish. Pass the step's timeout to `run_command`.",
            _no_timeout,
        ),
    ],
    test_context=_local_step_context,
)
