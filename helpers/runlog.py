"""A training run's folder: per-step metrics on disk, and what a restart needs to resume.

`runs/<run_name>/metrics.jsonl` gets one line per completed step, written as the step
ends. `state.json` records the last completed step and the Tinker checkpoint
(`save_state`) holding the weights and optimizer after it. Re-running with the same
`run_name` reads both and continues after that step: no step is lost or repeated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

# Tests point this elsewhere so they never read or clobber a real run.
RUNS_DIR = Path(os.environ.get("COURSE_RUNS_DIR", Path(__file__).resolve().parent.parent / "runs"))


class RunLog:
    def __init__(self, run_name: str, runs_dir: Path = RUNS_DIR) -> None:
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

    def resume(self) -> dict:
        """Drop metric lines of steps after the last committed one, then return the state.

        A run killed between writing a step's metrics and committing its checkpoint
        redoes that step, so its stale line must go.
        """
        state = self.state()
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


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
