"""A training run's folder, `runs/<run_name>/`: `metrics.jsonl`, a line per completed step, and
`state.json`: the run's settings, its id, the last completed step, the Tinker checkpoint after
it and the held-out scores. Re-running with the same `run_name` and settings continues after
that step, losing or repeating none. The run id (made at the start, kept on resume) goes into
Sail's `tinker_lora_name`: `{run_name}-step-{k}` alone would repeat across attendees and reruns.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from helpers.errors import CourseConfigError

# Tests point this elsewhere so they never read or clobber a real run.
RUNS_DIR = Path(os.environ.get("COURSE_RUNS_DIR", Path(__file__).resolve().parent.parent / "runs"))
# The id of each run this process started or resumed, by run_name (see `run_id`).
_RUN_IDS: dict[str, str] = {}


def new_run_id() -> str:
    """A fresh run id: 12 random hex digits, unlikely to repeat among any course's runs."""
    return secrets.token_hex(6)


def run_id(run_name: str) -> str:
    """The id of run `run_name` in this process: the one its folder records once
    `RunLog.resume` has started or resumed it, else a fresh one kept for the process's life
    (a run with no folder, such as notebook 07's, never resumes)."""
    return _RUN_IDS.setdefault(run_name, new_run_id())


class RunLog:
    def __init__(self, run_name: str, runs_dir: Path = RUNS_DIR) -> None:
        self.name = run_name
        self.dir = runs_dir / run_name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.dir / "metrics.jsonl"
        self.state_path = self.dir / "state.json"

    def state(self) -> dict:
        """{"completed_steps": n, "checkpoint": tinker path or None, ...}; empty run: n = 0."""
        if not self.state_path.exists():
            return {"completed_steps": 0, "checkpoint": None}
        return json.loads(self.state_path.read_text())

    def records(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line]

    def resume(self, settings: dict) -> dict:
        """Check `settings` against the run's, drop uncommitted metric lines, return the state.

        A new run records `settings` and a new run id; a resumed run keeps its id (`run_id`
        returns it from now on) and must have the settings it started with (else it would be
        two runs in one): anything else is a CourseConfigError naming what differs. A run
        killed between a step's metrics and its checkpoint redoes that step: its line goes.
        """
        state = self.state()
        if "settings" not in state:
            if state["completed_steps"] or "eval_before" in state:
                raise CourseConfigError(
                    f"run_name {self.name!r} holds a run from an older version of this "
                    "notebook, which did not record its settings; pick a new run_name."
                )
            self.commit(settings=settings, run_id=new_run_id())
            state = self.state()
        elif state["settings"] != settings:
            raise CourseConfigError(_settings_differ(self.name, state["settings"], settings))
        if "run_id" not in state:  # started before runs had ids
            self.commit(run_id=new_run_id())
            state = self.state()
        _RUN_IDS[self.name] = state["run_id"]
        kept = [r for r in self.records() if r["step"] < state["completed_steps"]]
        _write_atomically(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))
        return state

    def append(self, record: dict) -> None:
        with self.metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def commit(self, **state: object) -> None:
        """Record progress in one atomic write (a kill leaves the old or the new state)."""
        _write_atomically(self.state_path, json.dumps({**self.state(), **state}, indent=2))


def _settings_differ(run_name: str, recorded: dict, asked: dict) -> str:
    """One sentence: which settings differ, and the two ways forward."""
    differences = " and ".join(
        f"{name}={recorded.get(name)!r}, not {asked.get(name)!r}"
        for name in sorted(recorded.keys() | asked.keys())
        if recorded.get(name) != asked.get(name)
    )
    return (
        f"run_name {run_name!r} holds a run started with {differences}; set those back to "
        "resume it, or pick a new run_name to start a new run with these settings."
    )


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
