"""A real `make sweep` on the local stack, killed and run again: a tiny sweep of three runs
leaves a folder per run (metrics, state, the executed notebooks 04 and 05), re-runs only the
run the kill interrupted, and survives a run that fails. Five notebook runs, about three
minutes: here, not in CI, whose cloud rehearsal runs a sweep of its own (`make rehearse-cloud`).
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat

from sweeps.runner import OWNER_FILE
from tests.notebook_support import error_outputs, kill_everything_started_with
from tests.sweep_support import TINY, finish, sweep
from tests.wait_support import wait_until


def grid_file(tmp_path: Path, steps: int, seeds: int) -> Path:
    path = tmp_path / "tiny.toml"
    seed_list = ", ".join(str(seed) for seed in range(seeds))
    path.write_text(f'name = "tiny"\n[parameters]\nseed = [{seed_list}]\nsteps = {steps}\n')
    return path


def assert_finished_run(folder: Path, steps: int) -> None:
    metrics = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == list(range(steps))
    assert json.loads((folder / "state.json").read_text())["completed_steps"] == steps
    for notebook in ("04_training_loop", "05_did_it_learn"):  # the run, then its evaluation
        executed = nbformat.read(folder / f"{notebook}.ipynb", as_version=4)
        assert executed.metadata.papermill.parameters["run_name"] == folder.name
        assert not error_outputs(executed)
    assert json.loads((folder / "state.json").read_text())["eval_after"]["completed_steps"] == steps


def test_a_killed_sweep_reruns_only_the_unfinished_run_and_survives_a_failed_run(
    run_env: dict, tmp_path: Path
) -> None:
    """A tiny sweep of three runs leaves a folder per run (metrics, state, executed
    notebook). Killed while its second run trains, it re-runs only that one; its third run
    cannot start (a broken state.json an earlier try of the sweep left), which fails that run
    alone, in one line, and the sweep still ends with the others done. (One sweep shows both,
    where a second tiny sweep showed the failed run.)"""
    runs, steps = tmp_path / "runs", 4
    broken = runs / "tiny-seed2"
    broken.mkdir(parents=True)
    (broken / "state.json").write_text("{not json")  # this run's notebook cannot resume it
    (broken / OWNER_FILE).write_text(json.dumps({"sweep": "tiny"}))  # an earlier try of this sweep
    args = ["--grid", str(grid_file(tmp_path, steps, seeds=3)), *TINY]
    first = sweep(args, run_env, start_new_session=True)
    second = runs / "tiny-seed1" / "state.json"

    def second_started() -> bool:
        return second.exists() and json.loads(second.read_text())["completed_steps"] >= 1

    wait_until(lambda: second_started() or first.poll() is not None, "the second run", 600, 0.05)
    assert second_started(), first.stdout.read()
    kill_everything_started_with(run_env)  # the sweep, its runs and their kernels: SIGKILL
    first.communicate()
    done = json.loads(second.read_text())["completed_steps"]
    assert done < steps, "the second run finished before the kill: nothing was interrupted"
    assert_finished_run(runs / "tiny-seed0", steps)
    untouched = {p: p.stat().st_mtime_ns for p in (runs / "tiny-seed0").iterdir()}

    code, output = finish(sweep(args, run_env))
    assert code == 1, output
    assert "tiny-seed0: finished earlier, not run again" in output
    assert "tiny-seed0: started" not in output
    assert f"tiny-seed1: started, resuming after step {done - 1}" in output
    assert "tiny-seed2: FAILED" in output and "JSONDecodeError" in output
    assert "done: 2 finished, 1 failed (tiny-seed2)" in output
    assert "steps (" in output  # overall progress
    assert_finished_run(runs / "tiny-seed1", steps)
    assert {p: p.stat().st_mtime_ns for p in (runs / "tiny-seed0").iterdir()} == untouched
    assert sorted(p.name for p in runs.iterdir() if p.name != "local-stack") == [
        "tiny-seed0",
        "tiny-seed1",
        "tiny-seed2",
    ]
