"""Run names that would collide are refused in one sentence: the stack's own folder, and a
sweep run over a folder that a notebook or another sweep wrote. A sweep needs a name, runs
at most `MAX_RUNS` runs, and in the cloud prints and keeps to a sweep-wide budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.errors import CourseConfigError
from helpers.params import run_name
from sweeps import runner

FAKE_CLOUD_KEYS = {"TINKER_API_KEY": "tml-fake-for-the-budget", "SAIL_API_KEY": "sk_fake"}


@pytest.fixture
def runs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(runner, "RUNS_DIR", tmp_path)
    return tmp_path


def refusal(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one line a sweep that does not start prints."""
    assert runner.main([*argv, "--dry-run"]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("sweep not started: ") and line.endswith(".")
    return line


@pytest.mark.parametrize("name", ["local-stack", "Local-Stack"])
def test_a_run_may_not_write_into_the_stacks_folder(name: str) -> None:
    with pytest.raises(CourseConfigError, match="the local stack's own folder") as refused:
        run_name("run_name", name, None)
    assert str(refused.value).count(". ") == 0
    run_name("run_name", "local-stack-2", None)  # only the folder itself is taken


def test_an_empty_sweep_name_is_refused(runs_dir: Path, capsys) -> None:
    assert "the sweep's name must be 1-48 letters" in refusal(["--name", ""], capsys)
    assert not list(runs_dir.iterdir())


def test_a_grid_over_the_cap_is_refused(runs_dir: Path, capsys) -> None:
    seeds = [str(seed) for seed in range(runner.MAX_RUNS + 1)]
    line = refusal(["-p", "seed", *seeds, "-p", "learning_rate", "1e-3"], capsys)
    assert f"the grid gives {runner.MAX_RUNS + 1} runs; a sweep runs at most" in line


def test_a_sweep_does_not_extend_a_notebooks_run(runs_dir: Path, capsys) -> None:
    notebook_run = runs_dir / "mine"
    notebook_run.mkdir()
    (notebook_run / "state.json").write_text(json.dumps({"completed_steps": 2}))
    one_run = ["--name", "mine", "-p", "seed", "0", "-p", "learning_rate", "1e-3"]
    assert "already holds a run that sweep 'mine' did not start" in refusal(one_run, capsys)
    # A folder this sweep started is its own: running it again resumes it.
    (notebook_run / runner.OWNER_FILE).write_text(json.dumps({"sweep": "mine"}))
    assert runner.main([*one_run, "--dry-run"]) == 0
    (notebook_run / runner.OWNER_FILE).write_text(json.dumps({"sweep": "other"}))
    assert "did not start" in refusal(one_run, capsys)


def test_a_cloud_sweep_prints_and_keeps_its_sweep_wide_budget(
    runs_dir: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in FAKE_CLOUD_KEYS.items():
        monkeypatch.setenv(name, value)
    assert runner.main(["--dry-run", "-p", "backend", "cloud"]) == 0
    printed = capsys.readouterr().out
    whole = int(
        printed.split("whole sweep: ")[1].split("at most ")[1].split(" ")[0].replace(",", "")
    )
    budget = runner.DEFAULT_SWEEP_BUDGET_SAMPLED_TOKENS
    assert f"sweep-wide budget: at most {budget:,} sampled tokens" in printed
    assert f"this sweep may sample {whole:,}" in printed
    line = refusal(["-p", "backend", "cloud", "--budget-sampled-tokens", str(whole - 1)], capsys)
    assert f"may sample {whole:,} tokens, more than its sweep-wide budget of {whole - 1:,}" in line
