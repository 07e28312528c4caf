"""A sweep's runs kept in a measurement file, so that notebook 06 compares runs long enough to
differ without waiting for them: `scripts/stored_sweep.py` writes the file from the run
folders of `sweeps/stored.toml`, and `stored_runs` reads it back as `Run`s, which the
comparison code (`sweeps.compare`) takes as it takes run folders.

A run keeps what the comparison reads and nothing else: its settings, its completed steps,
each step's training scores, and per held-out set, before and after training, the pooled
scores and the counts per problem that the intervals come from. The counts are stored as
columns (one list per count, in problem order), so that the file stays small.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from helpers.measurements import MEASUREMENTS_DIR
from sweeps.runs import Run

COUNTS = ("samples", "reward", "correct", "format", "correct_and_format")
CURVE_SCORES = ("reward", "correct", "format", "correct_given_format")
DIGITS = 4  # scores and rewards are means and sums of rewards of 0, 0.1, 0.9 or 1 per sample


def stored_run(run: Run) -> dict[str, Any]:
    """What the file keeps of a finished `run` (one whose `after()` is not None)."""
    after = run.after()
    if after is None:
        raise ValueError(f"{run.name} has no after-training scores: {run.missing_after()}")
    return {
        "name": run.name,
        "settings": run.settings,
        "completed_steps": run.completed_steps,
        "curve": {
            "step": [record["step"] for record in run.records],
            **{
                score: [round(float(record[score]), DIGITS) for record in run.records]
                for score in CURVE_SCORES
                if all(score in record for record in run.records)
            },
        },
        "before": {name: _scores(scores) for name, scores in run.before().items()},
        "after": {name: _scores(scores) for name, scores in after.items()},
    }


def _scores(scores: dict) -> dict[str, Any]:
    pooled = {k: round(float(v), DIGITS) for k, v in scores.items() if k in CURVE_SCORES}
    problems = scores["problems"]
    columns = {key: [round(float(p[key]), DIGITS) for p in problems] for key in COUNTS}
    return {**pooled, "samples": int(scores["samples"]), "problems": columns}


def stored_runs(measurement: dict[str, Any]) -> list[Run]:
    """The runs of a stored sweep (`load_measurement`), as `Run`s with nothing on disk."""
    return [_run(stored, measurement["script"]) for stored in measurement["runs"]]


def _run(stored: dict[str, Any], script: str) -> Run:
    curve = stored["curve"]
    records = [
        {name: values[index] for name, values in curve.items()}
        for index in range(len(curve["step"]))
    ]
    state = {
        "completed_steps": stored["completed_steps"],
        "settings": stored["settings"],
        "eval_before": {name: _unstored(s) for name, s in stored["before"].items()},
        "eval_after": {
            "completed_steps": stored["completed_steps"],
            "scores": {name: _unstored(s) for name, s in stored["after"].items()},
        },
    }
    folder = Path(MEASUREMENTS_DIR) / f"(stored by {script})" / stored["name"]
    return Run(stored["name"], folder, records, state, None, {}, True)


def _unstored(scores: dict[str, Any]) -> dict[str, Any]:
    columns = [scores["problems"][key] for key in COUNTS]
    problems = [dict(zip(COUNTS, counts, strict=True)) for counts in zip(*columns, strict=True)]
    return {**scores, "problems": problems}
