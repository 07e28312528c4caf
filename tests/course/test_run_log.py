"""The run log's rules (helpers/runlog.py), in-process: what a new run records, what a
resumed run is allowed, which metric lines survive a restart, and that writes are atomic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.errors import CourseConfigError
from helpers.runlog import RunLog

SETTINGS = {"group_size": 4, "learning_rate": 1e-4, "steps": 3}


def test_a_new_run_is_empty_and_records_its_settings(tmp_path: Path) -> None:
    run = RunLog("fresh", tmp_path)
    assert run.dir == tmp_path / "fresh" and run.dir.is_dir()
    assert run.state() == {"completed_steps": 0, "checkpoint": None}
    assert run.records() == []
    state = run.resume(SETTINGS)
    run_id = state.pop("run_id")  # a new id for every new run (tests/course/test_run_ids.py)
    assert state == {"completed_steps": 0, "checkpoint": None, "settings": SETTINGS}
    assert json.loads((run.dir / "state.json").read_text()) == {**state, "run_id": run_id}
    assert run.records() == []


def test_resume_continues_after_the_last_committed_step(tmp_path: Path) -> None:
    run = RunLog("resumed", tmp_path)
    run.resume(SETTINGS)
    for step in range(3):
        run.append({"step": step, "reward": step / 10})
    run.commit(completed_steps=2, checkpoint="tinker://run/weights/step-2")
    # A kernel restart: a new RunLog on the same folder, the same settings.
    state = RunLog("resumed", tmp_path).resume(dict(SETTINGS))
    assert state["completed_steps"] == 2
    assert state["checkpoint"] == "tinker://run/weights/step-2"
    assert state["settings"] == SETTINGS
    # Step 2's line was written but its checkpoint never committed: it is redone, so it goes.
    assert run.records() == [{"step": 0, "reward": 0.0}, {"step": 1, "reward": 0.1}]
    assert (run.dir / "metrics.jsonl").read_text().count("\n") == 2


def test_resume_keeps_every_committed_step(tmp_path: Path) -> None:
    run = RunLog("finished", tmp_path)
    run.resume(SETTINGS)
    for step in range(3):
        run.append({"step": step})
    run.commit(completed_steps=3, eval_before={"reward": 0.1}, eval_after={"reward": 0.4})
    state = run.resume(SETTINGS)
    assert [r["step"] for r in run.records()] == [0, 1, 2]
    assert state["eval_before"] == {"reward": 0.1} and state["eval_after"] == {"reward": 0.4}


def test_resume_with_other_settings_is_refused_naming_each_difference(tmp_path: Path) -> None:
    run = RunLog("changed", tmp_path)
    run.resume(SETTINGS)
    run.append({"step": 0})
    run.commit(completed_steps=1)
    before = (run.dir / "state.json").read_text(), run.records()
    asked = {**SETTINGS, "learning_rate": 3e-4, "steps": 5, "seed": 1}
    del asked["group_size"]
    with pytest.raises(CourseConfigError) as refused:
        run.resume(asked)
    # Each difference named, sorted by name; nothing the two share.
    assert str(refused.value) == (
        "run_name 'changed' holds a run started with group_size=4, not None and "
        "learning_rate=0.0001, not 0.0003 and seed=None, not 1 and steps=3, not 5; set those "
        "back to resume it, or pick a new run_name to start a new run with these settings."
    )
    # A refused resume changes nothing on disk.
    assert ((run.dir / "state.json").read_text(), run.records()) == before


@pytest.mark.parametrize(
    "old_state",
    [{"completed_steps": 2, "checkpoint": "tinker://x"}, {"completed_steps": 0, "eval_before": {}}],
)
def test_a_run_from_before_settings_were_recorded_is_refused(tmp_path: Path, old_state) -> None:
    run = RunLog("old", tmp_path)
    (run.dir / "state.json").write_text(json.dumps(old_state))
    with pytest.raises(CourseConfigError) as refused:
        run.resume(SETTINGS)
    assert str(refused.value) == (
        "run_name 'old' holds a run from an older version of this notebook, which did not "
        "record its settings; pick a new run_name."
    )
    assert json.loads((run.dir / "state.json").read_text()) == old_state


def test_a_run_with_no_progress_and_no_settings_just_starts(tmp_path: Path) -> None:
    run = RunLog("empty", tmp_path)
    (run.dir / "state.json").write_text(json.dumps({"completed_steps": 0, "checkpoint": None}))
    assert run.resume(SETTINGS)["settings"] == SETTINGS


def test_commit_merges_into_the_state_and_leaves_no_partial_file(tmp_path: Path) -> None:
    run = RunLog("commits", tmp_path)
    run.commit(completed_steps=1, checkpoint="a")
    run.commit(checkpoint="b")
    assert run.state() == {"completed_steps": 1, "checkpoint": "b"}
    assert sorted(p.name for p in run.dir.iterdir()) == ["state.json"]
    run.commit(settings=SETTINGS)
    run.append({"step": 0})
    run.append({"step": 1})
    run.resume(SETTINGS)  # step 1 was never committed
    assert run.records() == [{"step": 0}]
    assert sorted(p.name for p in run.dir.iterdir()) == ["metrics.jsonl", "state.json"]


def test_records_skip_blank_lines(tmp_path: Path) -> None:
    run = RunLog("blank", tmp_path)
    (run.dir / "metrics.jsonl").write_text('{"step": 0}\n\n{"step": 1}\n')
    assert run.records() == [{"step": 0}, {"step": 1}]
