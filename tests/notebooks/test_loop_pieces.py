"""A `# @save` piece edited in notebook 04 is the piece its loop runs, with no `make helpers`:
every piece the step calls is defined above the loop, and the `run_step` the check hands the
loop (here the course's, since the stub is left unwritten) calls the pieces as the notebook
defines them. (`CountingPolicy`, which `rollout_groups` uses, is defined after the loop and
imported from `helpers/training.py`: an edit of it needs `make helpers`.)

The edit: `split_degenerate_groups` calls every group degenerate. `helpers/training.py` keeps
the course's version, under which a step of 8 groups of 4 trains unless all 8 groups happen
to be degenerate (about 1 in 10^4 per step at the base model's ~30% correct rate). With the
edit, every step of the run is skipped: no datums, 100% degenerate."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from tests.notebook_source import NOTEBOOKS
from tests.notebook_support import SMALL_PARAMETERS, finish, papermill

NOTEBOOK = "04_training_loop"
HEAD = "def split_degenerate_groups("
EDIT = "    return [], list(groups)  # edited in the notebook: every group is degenerate\n"


def notebook_with_edited_piece(folder: Path) -> Path:
    book = nbformat.read(NOTEBOOKS / f"{NOTEBOOK}.ipynb", as_version=4)
    [cell] = [c for c in book.cells if c.cell_type == "code" and HEAD in c.source]
    docstring_end = cell.source.index('"""\n', cell.source.index('"""') + 3) + 4
    cell.source = cell.source[:docstring_end] + EDIT + cell.source[docstring_end:]
    path = folder / "04_edited.ipynb"
    nbformat.write(book, path)
    return path


def test_an_edited_piece_is_the_one_the_loop_runs(shared_stack_env: dict, tmp_path: Path) -> None:
    parameters = {
        **SMALL_PARAMETERS[f"{NOTEBOOK}.ipynb"],
        "run_name": "edited-piece",
        "steps": 2,
        "group_size": 4,
        "groups_per_step": 8,
    }
    out = tmp_path / "out.ipynb"
    code, log = finish(
        papermill(str(notebook_with_edited_piece(tmp_path)), out, parameters, shared_stack_env)
    )
    assert code == 0, log[-3000:]
    metrics = Path(shared_stack_env["COURSE_RUNS_DIR"]) / "edited-piece" / "metrics.jsonl"
    records = [json.loads(line) for line in metrics.read_text().splitlines() if line]
    assert len(records) == parameters["steps"]
    assert [(r["skipped"], r["datums"], r["degenerate_pct"]) for r in records] == [
        (True, 0, 100.0)
    ] * parameters["steps"], records
    # The rollouts were real and mixed: the edit, not the model, made every group degenerate.
    assert any(0 < r["correct"] < 1 for r in records), records
