"""What the sweep tests share: the sweep command and its tiny runs, and finished runs written
by hand whose comparison is worked out independently: older-style `fx-*` runs (the `fixture_runs`
fixture in tests/conftest.py), and runs named and laid out as `make sweep` leaves them
(`write_sweep_runs`)."""

from __future__ import annotations

import copy
import json
import random
import subprocess
import sys
from pathlib import Path

import nbformat

from sweeps.runner import NOTEBOOK as RUNNER_NOTEBOOK
from sweeps.runner import grid_from, parse_args, plan

ROOT = Path(__file__).resolve().parents[1]
SWEEP = [sys.executable, "-m", "sweeps.runner"]
# Tiny runs at the cloud rehearsal's sizes (two problems of two samples per step, four
# held-out samples), at one learning rate.
TINY = ["--profile", "rehearsal", "-p", "learning_rate", "1e-3"]


def sweep(args: list[str], env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [*SWEEP, *args], env=env, cwd=ROOT, text=True, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, **kwargs,
    )  # fmt: skip


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


SETTINGS = {"backend": "local", "group_size": 8, "groups_per_step": 8, "eval_problems": 3}


def problems(rewards_per_sample: list[list[float]]) -> list[dict]:
    """Per-problem counts as notebook 04 stores them, from each sample's reward (1, 0.9,
    0 or -0.1: right and boxed, right unboxed, wrong boxed, wrong unboxed)."""
    return [
        {
            "samples": len(rewards),
            "reward": sum(rewards),
            "correct": sum(r in (1.0, 0.9) for r in rewards),
            "format": sum(r in (1.0, 0.0) for r in rewards),
            "correct_and_format": sum(r == 1.0 for r in rewards),
        }
        for rewards in rewards_per_sample
    ]


def scores(counts: list[dict]) -> dict:
    total = {key: sum(p[key] for p in counts) for key in counts[0]}
    return {
        "reward": total["reward"] / total["samples"],
        "correct": total["correct"] / total["samples"],
        "format": total["format"] / total["samples"],
        "correct_given_format": total["correct_and_format"] / total["format"],
        "samples": total["samples"],
        "problems": counts,
    }


BEFORE = [[0.0, 0.0, 1.0, -0.1], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, -0.1, 0.0]]
# Four runs' held-out rewards after training: (learning_rate, seed) -> per problem.
AFTER = {
    (1e-3, 0): [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]],
    (1e-3, 1): [[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.9]],
    (3e-3, 0): [[1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0]],
    (3e-3, 1): [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 1.0]],
}


def write_run(runs: Path, name: str, state: dict, steps: int) -> None:
    folder = runs / name
    folder.mkdir(parents=True)
    (folder / "state.json").write_text(json.dumps(state))
    lines = [{"step": s, "reward": 0.2 + 0.01 * s, "correct": 0.3} for s in range(steps)]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def write_fixture_runs(runs: Path) -> Path:
    """Four finished runs in the newer format, one from today's notebook 04 (no settings,
    no after-training scores stored), and one run that matches no pattern."""
    before = {"unseen facts": scores(problems(BEFORE))}
    for (learning_rate, seed), after in AFTER.items():
        after_scores = {"unseen facts": scores(problems(after))}
        state = {
            "settings": {**SETTINGS, "learning_rate": learning_rate, "seed": seed},
            "completed_steps": 6,
            "eval_before": before,
            "eval_after": {"completed_steps": 6, "scores": after_scores},
        }
        write_run(runs, f"fx-lr{learning_rate:g}-seed{seed}", state, 6)
    flat = {k: v for k, v in before["unseen facts"].items() if k != "problems"}
    write_run(runs, "fx-older", {"completed_steps": 6, "eval_before": flat}, 6)
    write_run(runs, "unrelated", {"completed_steps": 1, "eval_before": flat}, 1)
    return runs


# -- runs named and laid out as `make sweep` leaves them ------------------------------------

# The three held-out sets notebook 05 scores a local run on, in the order it stores them.
LOCAL_HELD_OUT = ("known facts, not trained", "seen facts, new wording", "unseen facts")
# Made-up held-out counts out of eval_problems x eval_samples = 200 samples: (well-formed,
# right among the well-formed, right but not well-formed). Before training they are the same
# for every run; after, they depend on the learning rate and the seed only. The largest rate
# makes every answer well-formed but fewer of them right, so ranking by "reward" and by
# "correct_given_format" disagree.
SAMPLES = 200
COUNTS_BEFORE = (160, 40, 2)
COUNTS_AFTER = {3e-4: (162, 42, 2), 1e-3: (164, 46, 2), 3e-3: (200, 48, 0)}
# Seeds move "right among the well-formed" by these many samples, the later sets by one more
# each, so seeds of one setting spread.
SEED_OFFSET = {0: 0, 1: 4, 2: -3}


def sample_rewards(counts: tuple[int, int, int], shuffle: str) -> list[list[float]]:
    """Per problem (four samples each), the rewards of `counts`' samples in a fixed shuffle:
    1 right and boxed, 0.9 right unboxed, 0 wrong boxed, -0.1 wrong unboxed."""
    formed, right_formed, right_unformed = counts
    rewards = [1.0] * right_formed + [0.0] * (formed - right_formed) + [0.9] * right_unformed
    rewards += [-0.1] * (SAMPLES - len(rewards))
    random.Random(shuffle).shuffle(rewards)
    return [rewards[i : i + 4] for i in range(0, SAMPLES, 4)]


def held_out_counts(learning_rate: float | None, seed: int, set_index: int) -> tuple[int, ...]:
    """A run's counts on one held-out set: before training (`learning_rate` None) or after."""
    if learning_rate is None:
        return COUNTS_BEFORE
    formed, right_formed, right_unformed = COUNTS_AFTER[learning_rate]
    return formed, right_formed + SEED_OFFSET[seed] * (1 + set_index), right_unformed


def held_out(learning_rate: float | None, seed: int, run_name: str) -> dict:
    """Scores per held-out set as notebook 05's `evaluate` stores them."""
    return {
        name: {
            **scores(problems(sample_rewards(held_out_counts(learning_rate, seed, i), run_name))),
            "dropped_rollouts": 0,
            "examples": [],
        }
        for i, name in enumerate(LOCAL_HELD_OUT)
    }


def step_record(run_name: str, step: int, learning_rate: float) -> dict:
    """One line of a run's metrics.jsonl, with the keys notebook 04's `run_step` logs; the
    training reward climbs by the step and jitters by a fixed draw."""
    jitter = random.Random(f"{run_name}-{step}").uniform(-0.08, 0.08)
    reward = round(0.15 + learning_rate * 20 * step + jitter, 4)
    return {
        "step": step, "correct": reward, "format": 0.9, "reward": reward,
        "degenerate_pct": 25.0, "skipped": False,
        "datums": 24, "dropped_rollouts": 0, "sampled_tokens": 600, "save_s": 0.05,
        "sample_s": 0.4, "train_s": 0.3, "advantage_abs_mean": 0.3, "optim/grad_norm": 2.0,
        "optim/learning_rate": learning_rate, "optim/loss_sum": -1.0,
        "optim/importance_weight_mean": 1.0, "optim/importance_weight_min": 0.99999,
        "optim/importance_weight_max": 1.00001, "optim/kl_sample_train_v1": 1e-8,
        "optim/kl_sample_train_v2": 1e-14, "optim/entropy": 0.3,
    }  # fmt: skip


def write_sweep_runs(runs: Path, sweep_args: list[str]) -> list[str]:
    """Finished runs, written by hand, in the folders `make sweep SWEEP="<sweep_args>"` fills:
    named by the sweep runner's plan of sweeps/default.toml (with `sweep_args` on top), each
    holding what a sweep's run leaves that notebook 06 reads: sweep.json, the executed
    notebook 04 with papermill's record of the parameters it was given, metrics.jsonl (a line
    a step) and state.json (settings, steps, checkpoint, held-out scores before and after).
    Their names, in the runner's order."""
    grid, name = grid_from(parse_args(sweep_args))
    notebook = nbformat.read(RUNNER_NOTEBOOK, as_version=4)
    names = []
    for run in plan(grid, name):
        folder, p, sizes = runs / run.name, run.parameters, run.sizes
        folder.mkdir(parents=True)
        (folder / "sweep.json").write_text(json.dumps({"sweep": run.sweep}))
        executed = copy.deepcopy(notebook)
        for cell in executed.cells:
            if cell.cell_type == "code":
                cell.metadata["papermill"] = {"status": "completed"}
        executed.metadata["papermill"] = {
            "parameters": run.given, "exception": None,
            "input_path": str(RUNNER_NOTEBOOK), "output_path": str(folder / RUNNER_NOTEBOOK.name),
        }  # fmt: skip
        nbformat.write(executed, folder / RUNNER_NOTEBOOK.name)
        (folder / "papermill.log").write_text("")
        lines = [step_record(run.name, s, p["learning_rate"]) for s in range(sizes["steps"])]
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        settings = {
            "backend": p["backend"], "model": "moonshotai/Kimi-K2.6", "lora_rank": 32,
            "group_size": p["group_size"], "learning_rate": p["learning_rate"],
            "max_tokens": sizes["max_tokens"], "temperature": p["temperature"],
            "completion_window": p["completion_window"], "groups_per_step": p["groups_per_step"],
            "seed": p["seed"], "eval_problems": sizes["eval_problems"],
            "eval_samples": sizes["eval_samples"],
        }  # fmt: skip
        assert sizes["eval_problems"] * sizes["eval_samples"] == SAMPLES, sizes
        state = {
            "completed_steps": sizes["steps"],
            "checkpoint": f"tinker://local:train:0/weights/{run.name}-state-{sizes['steps'] - 1}",
            "settings": settings,
            "eval_before": held_out(None, p["seed"], f"{run.name}-before"),
            "eval_after": {
                "completed_steps": sizes["steps"],
                "scores": held_out(p["learning_rate"], p["seed"], f"{run.name}-after"),
            },
        }
        (folder / "state.json").write_text(json.dumps(state, indent=2))
        names.append(run.name)
    return names
