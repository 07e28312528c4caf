"""What the sweep tests share: the sweep command, tiny runs, and finished runs written by hand
(the `fixture_runs` fixture in tests/conftest.py) whose comparison is worked out independently."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SWEEP = [sys.executable, "-m", "sweeps.runner"]
# Tiny runs: two problems of two samples per step, four held-out samples.
TINY = ["-p", "group_size", "2", "-p", "groups_per_step", "2"]
TINY += ["-p", "eval_problems", "4", "-p", "eval_samples", "1", "-p", "learning_rate", "1e-3"]

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
