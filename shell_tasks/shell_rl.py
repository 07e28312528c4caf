"""Notebook 04's loop on shell tasks: their group builders for `helpers.training.run_step`,
and their held-out evaluation.

Everything but the environment is notebook 04's (`helpers.training`): `run_step` takes
these groups as it takes arithmetic ones, and the evaluation uses its `rollout_groups` and
bootstrap intervals. The environment is `ShellTaskGroupBuilder`: each rollout gets its own
sandbox from `sandbox_factory` (`factory(env_dir, timeout_seconds)`,
`sail.tinker_sandbox_factory`'s shape), a group's sandboxes are created together, and
`grade_in_fresh_sandbox` grades each rollout's answer file in one more sandbox, out of the
policy's reach.

Locally the policy is the tiny shell model, `course/tiny-shell`; in the cloud, Kimi K2.6
itself (`policy_model_name`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tinker_cookbook.rl.types import TrajectoryGroup

from helpers.params import check_backend
from helpers.training import COUNTS, rollout_groups, scores
from kimi import MODEL_NAME, RENDERER_NAME
from shell_tasks.shell_env import (
    SandboxedStep,
    SandboxFactory,
    ScriptRule,
    ShellTaskGroupBuilder,
    bash_script,
    run_and_grade,
)

# The local stack's shell policy (see `local_stack.engine.model.BASE_MODEL_DIRS`).
LOCAL_SHELL_MODEL = "course/tiny-shell"


def policy_model_name(backend: str) -> str:
    """The base model that writes the shell: the tiny shell model locally, Kimi K2.6 in the
    cloud. Locally, its name gets the offline Kimi tokenizer (its ids are Kimi's)."""
    check_backend(backend)
    if backend == "cloud":
        return MODEL_NAME
    from tinker_cookbook.tokenizer_utils import register_tokenizer

    from kimi import offline_kimi_tokenizer

    register_tokenizer(LOCAL_SHELL_MODEL, offline_kimi_tokenizer)
    return LOCAL_SHELL_MODEL


def shell_course(course: Any) -> Any:
    """`course` with the shell policy as its model, so notebook 04's helpers train and sample
    it; the adapter config Sail checks each LoRA against names that model as its base."""
    model_name = policy_model_name(course.backend)
    adapter_config = course.adapter_config | {"base_model_name_or_path": model_name}
    return dataclasses.replace(course, model_name=model_name, adapter_config=adapter_config)


def group_builders(
    task_dirs: Sequence[Path],
    sandbox_factory: SandboxFactory,
    group_size: int,
    model_name: str,
    script_rule: ScriptRule = bash_script,
    step: SandboxedStep = run_and_grade,
) -> list[ShellTaskGroupBuilder]:
    """One group per task directory; each rollout in its own sandbox, created concurrently,
    its script found by `script_rule` and run and graded by `step`."""
    return [
        ShellTaskGroupBuilder(
            task_dir=task_dir,
            sandbox_factory=sandbox_factory,
            group_size=group_size,
            model_name=model_name,
            renderer_name=RENDERER_NAME,
            sandbox_creation="concurrent",
            script_rule=script_rule,
            step=step,
        )
        for task_dir in task_dirs
    ]


def scripts_run(groups: Sequence[TrajectoryGroup]) -> list[str]:
    """Every script the policy ran in `groups` (a rollout with no bash block ran none)."""
    return [
        str(t.transitions[-1].logs["script"])
        for g in groups
        for t in g.trajectories_G
        if "script" in t.transitions[-1].logs
    ]


async def evaluate_tasks(
    policy: Any,
    task_dirs: Sequence[Path],
    sandbox_factory: SandboxFactory,
    samples_per_task: int,
    model_name: str,
    script_rule: ScriptRule = bash_script,
    step: SandboxedStep = run_and_grade,
) -> dict:
    """Score `policy` on `task_dirs` without training: pooled scores ("correct" is pass@1)
    and the counts per task that `helpers.training.bootstrap_interval` resamples."""
    builders = group_builders(
        task_dirs, sandbox_factory, samples_per_task, model_name, script_rule, step
    )
    groups, dropped = await rollout_groups(builders, policy, min_successful=1)
    problems = [dict.fromkeys(COUNTS, 0.0) for _ in task_dirs]
    index = {Path(d).name: i for i, d in enumerate(task_dirs)}
    for group in groups:
        rewards = group.get_total_rewards()
        for trajectory, reward in zip(group.trajectories_G, rewards, strict=True):
            last = trajectory.transitions[-1]  # ShellTaskEnv logs which task it graded
            task, metrics = problems[index[str(last.logs["task"])]], last.metrics
            task["samples"] += 1
            task["reward"] += reward
            task["correct"] += metrics["test_passed"]
            task["format"] += metrics["has_bash_block"]
            task["correct_and_format"] += metrics["test_passed"] * metrics["has_bash_block"]
    totals = {key: sum(p[key] for p in problems) for key in COUNTS}
    return {
        **{score: float(value) for score, value in scores(totals).items()},
        "samples": int(totals["samples"]),
        "dropped_rollouts": dropped,
        "problems": problems,
    }
