"""Read run folders, whichever version of notebook 04 wrote them, and never fill a gap.

A run folder, `runs/<run_name>/`, holds `metrics.jsonl` (one line per step, each with at
least `step` and `reward`) and `state.json` (`completed_steps`, `eval_before`; newer runs
also store `eval_after` and the run's `settings`). Runs made by `make sweep` or `make run`
also keep the executed notebook there, whose papermill metadata records the parameters it
ran with and whether every cell ran. What a folder lacks stays missing, with a sentence
saying why: a comparison must not show a score nobody measured.
"""

from __future__ import annotations

import ast
import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

from helpers.runlog import RUNS_DIR

# Older runs score one held-out set, stored flat; newer ones store {set name: scores}.
SINGLE_SET = "held-out"


@dataclass(frozen=True)
class Run:
    """One run folder as found on disk."""

    name: str
    dir: Path
    records: list[dict]  # metric lines, one per committed step, in step order
    state: dict
    papermill: dict | None  # the executed notebook's papermill metadata, if it is here
    defaults: dict  # that notebook's parameters cell
    notebook_completed: bool  # that notebook ran every cell without an error
    damage: str = ""  # what could not be read, if anything

    @property
    def completed_steps(self) -> int:
        return int(self.state.get("completed_steps", 0))

    @property
    def settings(self) -> dict:
        """The notebook's defaults, the parameters given, then what state.json resolved
        (e.g. `learning_rate=None` becomes the backend's default there)."""
        given = {**self.defaults, **(self.papermill or {}).get("parameters", {})}
        resolved = {**given, **self.state.get("settings", {})}
        resolved.pop("run_name", None)
        return resolved

    def before(self) -> dict[str, dict]:
        """Held-out scores before training, per held-out set ({} if not measured yet)."""
        return _by_set(self.state.get("eval_before") or {})

    def after(self) -> dict[str, dict] | None:
        """Held-out scores after the last completed step, per set, or None (see `missing_after`)."""
        return None if self.missing_after() else _by_set(_after_scores(self.state["eval_after"]))

    def missing_after(self) -> str | None:
        """Why this run has no after-training scores to compare, or None if it has them."""
        after, asked = self.state.get("eval_after"), self.settings.get("steps")
        if self.damage:
            return self.damage
        if isinstance(asked, int) and self.completed_steps < asked:
            return f"unfinished: {self.completed_steps} of {asked} steps done"
        if after is None:
            if "settings" not in self.state:  # written before notebook 04 stored its settings
                return "its notebook 05 printed the after-training scores but did not store them"
            return "not evaluated after training yet"
        measured_at = after.get("completed_steps", self.completed_steps)
        if measured_at != self.completed_steps:
            return (
                f"the after-training scores are from step {measured_at}, but the run has "
                f"{self.completed_steps} steps now"
            )
        return None

    def is_finished(self, steps: int) -> bool:
        """Trained for `steps` and evaluated after the last of them. Runs whose state.json
        does not store the after-evaluation count as evaluated once their executed
        notebook ran to the end, since measuring it is what that notebook does last."""
        if self.completed_steps < steps:
            return False
        if "eval_after" in self.state:
            return self.missing_after() is None
        return self.notebook_completed


def read_run(folder: Path) -> Run:
    """The run in `folder` (which may not exist yet: a run with nothing done)."""
    state_path, metrics_path = folder / "state.json", folder / "metrics.jsonl"
    state, damage = {}, ""
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text())
        except ValueError as error:
            damage = f"its state.json cannot be read ({error})"
        if not isinstance(state, dict):
            state, damage = {}, damage or "its state.json holds no JSON object"
    lines = metrics_path.read_text().splitlines() if metrics_path.exists() else []
    # A killed run may have logged a step it never committed (notebook 04 drops that line
    # when it resumes), or left half a line: neither is a step of the run.
    committed = state.get("completed_steps", 0)
    records = sorted(
        (r for r in map(_record, lines) if r is not None and r["step"] < committed), key=_step
    )
    return Run(folder.name, folder, records, state, *_executed_notebook(folder), damage)


def find_runs(patterns: str, runs_dir: Path = RUNS_DIR) -> list[Run]:
    """Runs under `runs_dir` whose names match any of the space-separated names or glob
    patterns (e.g. "sweep-* arithmetic"), sorted by name."""
    wanted = patterns.split()
    folders = sorted(runs_dir.iterdir()) if runs_dir.is_dir() else []
    return [
        read_run(folder)
        for folder in folders
        if _is_run_folder(folder) and any(fnmatch.fnmatchcase(folder.name, p) for p in wanted)
    ]


def _is_run_folder(folder: Path) -> bool:
    return folder.is_dir() and (folder / "state.json").exists()


def _record(line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) and isinstance(record.get("step"), int) else None


def _step(record: dict) -> int:
    return record["step"]


def _by_set(scores: dict) -> dict[str, dict]:
    if isinstance(scores.get("reward"), int | float):
        return {SINGLE_SET: scores}
    return {name: value for name, value in scores.items() if isinstance(value, dict)}


def _after_scores(after: dict) -> dict:
    """Newer runs store {"completed_steps": n, "scores": ...}; take the scores either way."""
    return after.get("scores", after)


def notebook_defaults(notebook: dict) -> dict:
    """The values assigned in a notebook's cell tagged `parameters` (papermill records only
    the values it was given, not the defaults they override)."""
    sources = [
        "".join(cell["source"])
        for cell in notebook["cells"]
        if "parameters" in cell.get("metadata", {}).get("tags", [])
    ]
    return {
        target.id: ast.literal_eval(statement.value)
        for source in sources
        for statement in ast.parse(source).body
        if isinstance(statement, ast.Assign)
        for target in statement.targets
        if isinstance(target, ast.Name)
    }


def _executed_notebook(folder: Path) -> tuple[dict | None, dict, bool]:
    """The papermill metadata of the notebook executed for this run (its `run_name`
    parameter is the folder's name), its parameters cell's defaults, and whether every
    one of its code cells completed."""
    for path in sorted(folder.glob("*.ipynb")):
        try:
            notebook = json.loads(path.read_text())
        except (OSError, ValueError):  # being written by a run in progress
            continue
        papermill = notebook.get("metadata", {}).get("papermill") or {}
        if papermill.get("parameters", {}).get("run_name") != folder.name:
            continue
        cells = [c for c in notebook.get("cells", []) if c.get("cell_type") == "code"]
        statuses = [c.get("metadata", {}).get("papermill", {}).get("status") for c in cells]
        completed = not papermill.get("exception") and all(s == "completed" for s in statuses)
        return papermill, notebook_defaults(notebook), completed
    return None, {}, False
