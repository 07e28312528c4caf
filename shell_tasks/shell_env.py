"""A one-turn RL environment whose action is a shell script, graded by the task's own tests.

Action format: the policy answers with a ```bash fenced block. Its contents run as one
bash script in the task's working directory inside a sandbox; then the files the task
declares as `artifacts` are copied into a fresh sandbox from the same factory, where
`tests/test.sh` runs in a clean shell, and the reward is what it writes to
/logs/verifier/reward.txt there (see `shell_tasks.harbor_task.grade_in_fresh_sandbox`:
nothing else the script did reaches the grade). The block is looked for only in the reply's answer,
by notebook 01's rule (`bash_script`, as `helpers.scoring.graded_text`): the text after a
closed `</think>`, in a reply that stopped on its stop token. Text outside the block, thinking
included, is never executed; a reply cut off or still thinking, or one without a block, runs
nothing but the tests. A script that runs past its timeout earns 0 ungraded (`run_and_grade`).

Notebook 08's learner writes those two functions (exercises/sandboxed_rollouts.py); the
environment takes whichever the check chose, so the learner's own rule and step are what run.

The group builder takes any sandbox factory with `sail.tinker_sandbox_factory`'s shape
(`factory(env_dir, timeout_seconds)`), so the same code runs on Sailboxes or locally.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import tinker
from tinker_cookbook.completers import StopCondition
from tinker_cookbook.exceptions import RendererError
from tinker_cookbook.renderers import get_renderer
from tinker_cookbook.renderers.base import Message, Renderer
from tinker_cookbook.rl.types import Action, ActionExtra, Env, EnvGroupBuilder, StepResult
from tinker_cookbook.sandbox.sandbox_interface import SandboxInterface, SandboxResult
from tinker_cookbook.tokenizer_utils import get_tokenizer

from helpers.scoring import THINK_CLOSE
from shell_tasks.harbor_task import (
    GradingFactory,
    HarborTaskDir,
    Verdict,
    grade_in_fresh_sandbox,
    load_harbor_task,
)

logger = logging.getLogger(__name__)

# The rollouts' factory also makes their grading sandboxes, so it must make `GradingSandbox`es
# (the course's Sailbox and the local sandbox both are).
SandboxFactory = GradingFactory
SandboxCreation = Literal["sequential", "concurrent"]

SYSTEM_PROMPT = (
    "You solve tasks on a Linux machine by writing one bash script. Reply with exactly one "
    "```bash fenced block; it runs as a single script in {workdir}, then the task's tests "
    "check the result. Nothing outside the block is executed."
)
# What the policy's script may print back into the logs; the reward never depends on it.
MAX_COMMAND_OUTPUT_BYTES = 16 * 1024
_BASH_BLOCK = re.compile(r"```(?:bash|sh)[ \t]*\n(.*?)```", re.DOTALL)


def task_messages(instruction: str, workdir: str) -> list[Message]:
    """The conversation a policy sees for a task (the tiny shell model is built on it)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT.format(workdir=workdir)},
        {"role": "user", "content": instruction},
    ]


def extract_bash_script(text: str) -> str | None:
    """The first ```bash (or ```sh) fenced block in `text`, or None when there is none."""
    match = _BASH_BLOCK.search(text)
    return match.group(1) if match else None


def completion_text(renderer: Renderer, action: Action) -> tuple[str, bool]:
    """A completion's text before its stop token, and whether it stopped on one: False when
    it was cut off at max_tokens, or cannot be parsed (two stop tokens, say)."""
    try:
        _, termination = renderer.parse_response(action)
    except RendererError:
        return renderer.tokenizer.decode(action), False
    if not termination.is_clean:
        return renderer.tokenizer.decode(action), False
    stop_at = next(i for i, token in enumerate(action) if token in renderer.get_stop_sequences())
    return renderer.tokenizer.decode(action[:stop_at]), True


def bash_script(completion: str, stopped: bool) -> str | None:
    """The script a completion asks to run, by the grader's rule: the first ```bash or
    ```sh block of its answer, the text after its last `</think>`. None when it did not stop
    on its stop token, never closed its thinking, opened a new `<think>` after it, or has
    no such block in its answer."""
    if not stopped:
        return None
    _, closed, answer = completion.rpartition(THINK_CLOSE)
    if not closed or "<think>" in answer:
        return None
    return extract_bash_script(answer)


async def run_and_grade(
    script: str | None,
    sandbox: SandboxInterface,
    task: HarborTaskDir,
    sandbox_factory: GradingFactory,
    timeout_seconds: int,
) -> Verdict:
    """Run `script` in the policy's `sandbox`, in the task's working directory, killed after
    `timeout_seconds`; then grade it with the task's tests in a fresh sandbox. A script that
    ran out of time earns 0 ungraded; with no script, only the tests run."""
    if script is not None:
        ran = await sandbox.run_command(
            script,
            workdir=task.workdir,
            timeout=timeout_seconds,
            max_output_bytes=MAX_COMMAND_OUTPUT_BYTES,
        )
        if ran.metrics.get("timed_out"):
            metrics = {"reward": 0.0, "test_passed": 0.0, "grading_error": 0.0}
            return Verdict(0.0, metrics, f"not graded: the script ran past {timeout_seconds} s")
    return await grade_in_fresh_sandbox(sandbox, task, sandbox_factory, timeout_seconds)


ScriptRule = Callable[[str, bool], str | None]
SandboxedStep = Callable[
    [str | None, SandboxInterface, HarborTaskDir, GradingFactory, int], Awaitable[Verdict]
]


class _RunsNoted:
    """The policy's sandbox, noting each command run in it, so that the logs hold the
    script's exit code whoever's `run_and_grade` ran it."""

    def __init__(self, sandbox: SandboxInterface) -> None:
        self._sandbox = sandbox
        self.runs: list[SandboxResult] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._sandbox, name)

    async def run_command(self, *args: object, **kwargs: object) -> SandboxResult:
        result = await self._sandbox.run_command(*args, **kwargs)  # type: ignore[arg-type]
        self.runs.append(result)
        return result


class ShellTaskEnv(Env):
    """One episode: prompt with the task, run the policy's script in `sandbox`, grade its
    artifacts with test.sh in a fresh sandbox from `grader_factory`."""

    def __init__(
        self,
        *,
        renderer: Renderer,
        task: HarborTaskDir,
        sandbox: SandboxInterface,
        grader_factory: GradingFactory,
        command_timeout: int,
        script_rule: ScriptRule = bash_script,
        step: SandboxedStep = run_and_grade,
    ) -> None:
        self.renderer = renderer
        self.task = task
        self.sandbox = sandbox
        self.grader_factory = grader_factory
        self.command_timeout = command_timeout
        self.script_rule = script_rule
        self.step_in_sandbox = step

    def messages(self) -> list[Message]:
        return task_messages(self.task.instruction, self.task.workdir)

    async def initial_observation(self) -> tuple[tinker.ModelInput, StopCondition]:
        prompt = self.renderer.build_generation_prompt(self.messages())
        return prompt, self.renderer.get_stop_sequences()

    async def step(self, action: Action, *, extra: ActionExtra | None = None) -> StepResult:
        script = self.script_rule(*completion_text(self.renderer, action))
        if script is not None and not script.strip():
            script = None  # an empty block runs nothing (a Sailbox refuses an empty command)
        metrics: dict[str, float | int] = {"has_bash_block": float(script is not None)}
        logs: dict[str, str | int | float] = {"task": self.task.name}
        sandbox = _RunsNoted(self.sandbox)
        verdict = await self.step_in_sandbox(
            script,
            sandbox,  # type: ignore[arg-type]
            self.task,
            self.grader_factory,
            self.command_timeout,
        )
        if script is not None and sandbox.runs:
            ran = sandbox.runs[0]
            metrics["command_exit_code"] = ran.exit_code
            metrics["command_timed_out"] = float(bool(ran.metrics.get("timed_out")))
            logs.update(
                script=script,
                stdout=ran.stdout[:MAX_COMMAND_OUTPUT_BYTES],
                stderr=ran.stderr[:MAX_COMMAND_OUTPUT_BYTES],
            )
        logs["verifier"] = verdict.output[:MAX_COMMAND_OUTPUT_BYTES]
        graded = {"reward": verdict.reward, "test_passed": float(verdict.reward > 0)}
        return StepResult(
            reward=verdict.reward,
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=self.renderer.get_stop_sequences(),
            metrics={**metrics, "grading_error": 0.0, **graded, **verdict.metrics},
            logs=logs,
        )


async def upload_task_inputs(sandbox: SandboxInterface, task: HarborTaskDir) -> None:
    """Put the task's input files in place; a cloud image may not have its working directory."""
    created = await sandbox.run_command(f"mkdir -p {shlex.quote(task.workdir)}", workdir="/")
    if created.exit_code != 0:
        raise RuntimeError(f"could not create {task.workdir}: {created.stderr}")
    for path, content in task.input_files().items():
        written = await sandbox.write_file(path, content)
        if written.exit_code != 0:
            raise RuntimeError(f"could not upload {path}: {written.stderr}")


@dataclass
class ShellTaskGroupBuilder(EnvGroupBuilder):
    """A group of `ShellTaskEnv`s on one task, each with its own sandbox from `sandbox_factory`,
    and each graded in one more from the same factory (made and cleaned up by the grader).

    `sandbox_creation` chooses how the group's sandboxes are made: "sequential" awaits one
    after another, as cookbook 0.5.8's `HarborEnvGroupBuilder.make_envs` does, so a group
    of G costs G boot times; "concurrent" starts them together. Every sandbox ever created,
    including those from a retry's extra `make_envs` call, is cleaned up by `cleanup`.
    `script_rule` and `step` are the environment's two functions (the course's unless a
    notebook passes the learner's). Holds only paths, names and functions, so it pickles for
    rollout workers (a notebook's own functions, only within its process).
    """

    task_dir: Path
    sandbox_factory: SandboxFactory
    group_size: int
    model_name: str
    renderer_name: str
    sandbox_creation: SandboxCreation = "concurrent"
    sandbox_timeout: int = 600
    command_timeout: int = 60
    script_rule: ScriptRule = bash_script
    step: SandboxedStep = run_and_grade
    _sandboxes: list[SandboxInterface] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        self.task_dir = Path(self.task_dir)

    async def make_envs(self) -> Sequence[Env]:
        task = load_harbor_task(self.task_dir)
        renderer = get_renderer(self.renderer_name, get_tokenizer(self.model_name))

        async def ready_sandbox() -> SandboxInterface:
            sandbox = await self.sandbox_factory(task.environment_dir, self.sandbox_timeout)
            self._sandboxes.append(sandbox)
            await upload_task_inputs(sandbox, task)
            return sandbox

        if self.sandbox_creation == "sequential":
            sandboxes = [await ready_sandbox() for _ in range(self.group_size)]
        else:
            async with asyncio.TaskGroup() as group:
                pending = [group.create_task(ready_sandbox()) for _ in range(self.group_size)]
            sandboxes = [created.result() for created in pending]
        return [
            ShellTaskEnv(
                renderer=renderer,
                task=task,
                sandbox=sandbox,
                grader_factory=self.sandbox_factory,
                command_timeout=self.command_timeout,
                script_rule=self.script_rule,
                step=self.step,
            )
            for sandbox in sandboxes
        ]

    async def cleanup(self) -> None:
        sandboxes, self._sandboxes = self._sandboxes, []
        results = await asyncio.gather(
            *(sandbox.cleanup() for sandbox in sandboxes), return_exceptions=True
        )
        for sandbox, result in zip(sandboxes, results, strict=True):
            if isinstance(result, BaseException):
                logger.warning("Cleanup of sandbox %s failed: %s", sandbox.sandbox_id, result)

    def logging_tags(self) -> list[str]:
        return ["shell_task", self.task_dir.name]
