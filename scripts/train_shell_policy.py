"""Sandboxed RL on the shell task family, outside the notebook: `scripts/train_shell_policy.py`.

Runs notebook 04's loop (`helpers.training.run_step` on `shell_tasks.shell_rl.group_builders`)
on the local stack with the tiny shell model: every rollout's bash block runs in its own
local sandbox (`shell_tasks.sandboxes.sandbox_factory("local")`, no network) and
`grade_in_fresh_sandbox` grades its answer file in another. It prints, and writes to
`runs/<run-name>/`:
- `metrics.jsonl`, one line per step with its `reward`, as notebook 04 writes it;
- the mean reward of the first and last third of the steps, and their difference;
- held-out pass@1 before and after, with the course's paired bootstrap interval of the gain;
- `scripts.json`, every script the policy ran in training with its count, and in the summary
  those that name the grader's files (`TAMPERING`): what a reward hacker would try.
With `--seeds 0 1 2 3 4` it repeats the run per seed and counts the seeds whose held-out gain
has its 95% interval above 0 (issue 29 asks for at least 4 of 5), and stores every seed's
summary in measurements/shell_policy_seeds.json, with the command, date and commit, for
notebook 08 to render.
It exits 1 when the first run's last-third mean reward does not exceed its first third's by
`--min-rise` (0.15): a check that the loop learns, for CI or a changed model.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import statistics
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
# A script that names the grader's directories or its answer is an attempt to score without
# solving the task; the run lists every such script it saw (they all score 0).
TAMPERING = re.compile(r"/logs|/tests|reward|EXPECTED|test\.sh")


@dataclass(frozen=True)
class ShellRunSettings:
    """One run's sizes; the defaults are the ones the figures in the report were measured at."""

    steps: int = 24
    groups_per_step: int = 8
    group_size: int = 8
    learning_rate: float = 2e-3
    max_tokens: int = 40  # a clean reply takes about 22 tokens
    temperature: float = 1.0
    held_out_tasks: int = 48
    held_out_samples: int = 4


def thirds(rewards: list[float]) -> tuple[float, float]:
    """Mean reward of the first third of the steps and of the last third."""
    third = max(1, len(rewards) // 3)
    return statistics.fmean(rewards[:third]), statistics.fmean(rewards[-third:])


async def train_once(settings: ShellRunSettings, seed: int, run_dir: Path) -> dict:
    """One run from the base model: held-out before, `settings.steps` steps, held-out after."""
    import helpers
    from helpers.training import LoopSettings, bootstrap_interval, run_step
    from local_stack.client.control_client import set_knobs
    from local_stack.client.supervisor import start_local_stack
    from shell_tasks import task_family
    from shell_tasks.sandboxes import sandbox_factory, sandbox_problem
    from shell_tasks.shell_rl import evaluate_tasks, group_builders, scripts_run, shell_course

    if (problem := sandbox_problem("local")) is not None:
        raise SystemExit(f"no local sandbox on this machine: {problem}")
    stack = start_local_stack()
    course = shell_course(helpers.connect("local"))
    factory = sandbox_factory("local")
    tasks_root = run_dir / "tasks"
    held_out = task_family.write_tasks("held_out", settings.held_out_tasks, tasks_root)
    training_client = await course.service_client.create_lora_training_client_async(
        base_model=course.model_name, rank=course.adapter_config["r"], seed=seed
    )
    loop = LoopSettings(
        run_name=run_dir.name,
        group_size=settings.group_size,
        learning_rate=settings.learning_rate,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        completion_window="balanced",
    )

    async def held_out_now(name: str) -> dict:
        from helpers.training import delete_checkpoint, snapshot_policy

        set_knobs(stack.url, seed=seed)  # the same sampler stream before and after
        policy = await snapshot_policy(name, loop, training_client, course)
        result = await evaluate_tasks(
            policy, held_out, factory, settings.held_out_samples, course.model_name
        )
        await delete_checkpoint(course.service_client, policy.checkpoint_path)
        return result

    before = await held_out_now(f"{run_dir.name}-before")
    order = random.Random(seed)
    started, rewards, scripts_seen = time.perf_counter(), [], Counter()
    with open(run_dir / "metrics.jsonl", "w") as log:
        for step in range(settings.steps):
            indices = order.sample(range(100_000), settings.groups_per_step)
            task_dirs = [
                task_family.write_task(task_family.instance("train", i), tasks_root)
                for i in indices
            ]
            builders = group_builders(task_dirs, factory, settings.group_size, course.model_name)
            record, groups = await run_step(step, builders, loop, training_client, course)
            scripts_seen.update(scripts_run(groups))
            log.write(json.dumps(record) + "\n")
            log.flush()
            rewards.append(record["reward"])
            print(
                f"  step {step:3d} | reward {record['reward']:.3f} | "
                f"sample {record['sample_s']:.1f} s | train {record['train_s']:.1f} s",
                flush=True,
            )
    training_seconds = time.perf_counter() - started
    (run_dir / "scripts.json").write_text(json.dumps(scripts_seen.most_common(), indent=1))
    after = await held_out_now(f"{run_dir.name}-after")
    first, last = thirds(rewards)
    gain_low, gain_high = bootstrap_interval(before["problems"], after["problems"])["correct"]
    return {
        "seed": seed,
        "training_seconds": training_seconds,
        "first_third_reward": first,
        "last_third_reward": last,
        "held_out_before": before["correct"],
        "held_out_after": after["correct"],
        "held_out_gain_interval": [gain_low, gain_high],
        "held_out_format_before": before["format"],
        "held_out_format_after": after["format"],
        "distinct_scripts": len(scripts_seen),
        "tampering_scripts": [s for s in scripts_seen if TAMPERING.search(s)],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in asdict(ShellRunSettings()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--run-name", default="shell-rl")
    parser.add_argument("--min-rise", type=float, default=0.15)
    args = vars(parser.parse_args())
    seeds, run_name, min_rise = args.pop("seeds"), args.pop("run_name"), args.pop("min_rise")
    settings = ShellRunSettings(**args)
    # The runs' checkpoints are throwaway: keep them out of the course's storage.
    os.environ["COURSE_LOCAL_STACK_DIR"] = tempfile.mkdtemp(prefix="shell-rl-")
    from local_stack.client.supervisor import stop_local_stack
    from scripts.measurement_files import measurement_start, write_measurement

    started = measurement_start()

    results = []
    try:
        for seed in seeds:
            run_dir = REPO_ROOT / "runs" / f"{run_name}-seed{seed}"
            run_dir.mkdir(parents=True, exist_ok=True)
            print(f"seed {seed}: {json.dumps(asdict(settings))}", flush=True)
            result = asyncio.run(train_once(settings, seed, run_dir))
            (run_dir / "summary.json").write_text(json.dumps(result, indent=1))
            low, high = result["held_out_gain_interval"]
            print(
                f"seed {seed}: {settings.steps} steps in {result['training_seconds']:.0f} s; "
                f"mean reward first third {result['first_third_reward']:.3f} -> last third "
                f"{result['last_third_reward']:.3f} "
                f"(+{result['last_third_reward'] - result['first_third_reward']:.3f}); held-out "
                f"pass@1 {result['held_out_before']:.3f} -> {result['held_out_after']:.3f} "
                f"(gain 95% interval {low:+.3f} to {high:+.3f}); {result['distinct_scripts']} "
                f"distinct scripts, {len(result['tampering_scripts'])} naming the grader's files",
                flush=True,
            )
            results.append(result)
    finally:
        stop_local_stack()
    above = sum(r["held_out_gain_interval"][0] > 0 for r in results)
    print(f"held-out gain interval above 0 in {above} of {len(results)} seed(s)")
    by_seed = {result["seed"]: result for result in results}
    values = {"settings": asdict(settings), "by_seed": by_seed}
    print(f"stored in {write_measurement('shell_policy_seeds', started, values)}")
    first = results[0]
    if first["last_third_reward"] - first["first_third_reward"] < min_rise:
        raise SystemExit(f"the last third's mean reward did not rise by {min_rise}")


if __name__ == "__main__":
    main()
