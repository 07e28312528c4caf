"""Honest results: numbers that repeat, settings a run keeps, exercises that do what they
say, and storage that cleans itself.

Notebook 04's "Try this" bullets are executed here, literally, with small parameters (and
notebook 05 scores the base run), and checked for the change each announces; but for the
first, interrupting the kernel mid-loop
(test_try_this_04_interrupt.py, beside this file). Those of notebooks 01 and 02 run in
tests/course/test_try_this_01.py and test_try_this_02.py. The notebook 04 runs
share one runs folder and one local-stack storage folder, as a learner's would, so the last
test can check what that storage holds after them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from local_stack.client.supervisor import stop_local_stack
from tests.notebook_support import (
    assert_every_check_passes,
    kernel_env,
    printed,
    run,
    small,
    solved_copy,
    succeeded,
)

NOTEBOOK_03 = "04_training_loop.ipynb"
# group_size 8 so that the group_size 2 exercise has a baseline with few degenerate groups.
SMALL_03 = small(NOTEBOOK_03, group_size=8, run_name="base")
SMALL_EVALUATION = small("05_did_it_learn", run_name="base")  # notebook 05, on the base run
RUN_NAMES = ("base", "groups-of-2", "lr-x10", "temperature-0.5")  # sorted


def records(folder: Path, run_name: str) -> list[dict]:
    lines = (folder / "runs" / run_name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def state(folder: Path, run_name: str) -> dict:
    return json.loads((folder / "runs" / run_name / "state.json").read_text())


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


# -- notebook 04 ---------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _stop_the_tests_own_stack(tmp_path: Path) -> Iterator[None]:
    """A test that runs a notebook in `kernel_env(tmp_path)` leaves a stack behind (stacks
    outlive their kernels): stop it."""
    yield
    stop_local_stack(tmp_path / "stack")


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One runs folder and one local-stack storage folder for every notebook 04 run here."""
    folder = tmp_path_factory.mktemp("results")
    yield folder
    stop_local_stack(folder / "stack")


def run_03(shared: Path, out_name: str, **changes: object) -> nbformat.NotebookNode:
    return run(NOTEBOOK_03, shared / out_name, {**SMALL_03, **changes}, kernel_env(shared))


@pytest.fixture(scope="module")
def base(shared: Path) -> nbformat.NotebookNode:
    return succeeded(run_03(shared, "base.ipynb"))


def evaluate(shared: Path, out_name: str, **changes: object) -> nbformat.NotebookNode:
    """Notebook 05 (on the base run unless `changes` say otherwise): `make solutions`' copy,
    so that it is also 05's solved run."""
    solved = solved_copy("05_did_it_learn", shared / "solutions")
    return run(solved, shared / out_name, {**SMALL_EVALUATION, **changes}, kernel_env(shared))


@pytest.fixture(scope="module")
def base_evaluated(base: nbformat.NotebookNode, shared: Path) -> nbformat.NotebookNode:
    evaluated = succeeded(evaluate(shared, "base-evaluated.ipynb"))
    assert_every_check_passes(evaluated, "05_did_it_learn")  # pass_at_k's
    return evaluated


@pytest.fixture(scope="module")
def groups_of_2(shared: Path) -> nbformat.NotebookNode:
    """Try this: `group_size = 2`, `run_name = "groups-of-2"` (more groups: a clear count)."""
    return succeeded(
        run_03(
            shared, "groups-of-2.ipynb", group_size=2, groups_per_step=16, run_name="groups-of-2"
        )
    )


@pytest.fixture(scope="module")
def lr_x10(shared: Path) -> nbformat.NotebookNode:
    """Try this: `learning_rate = 1e-2` and `run_name = "lr-x10"`."""
    return succeeded(run_03(shared, "lr-x10.ipynb", learning_rate=0.01, run_name="lr-x10"))


@pytest.fixture(scope="module")
def temperature_half(shared: Path) -> nbformat.NotebookNode:
    """Try this: `temperature = 0.5` and `run_name = "temperature-0.5"`."""
    return succeeded(
        run_03(shared, "temperature.ipynb", temperature=0.5, run_name="temperature-0.5")
    )


HELD_OUT_CELLS = (  # notebook 05's
    '"reading": verdict(',  # every score and gain with its interval, and what each gain says
)


def test_rerunning_a_finished_run_prints_identical_numbers(
    base: nbformat.NotebookNode, base_evaluated: nbformat.NotebookNode, shared: Path
) -> None:
    """Try this: run the notebook once more, unchanged: nothing trains; 05, run again,
    measures nothing again and prints the same numbers."""
    tinker_runs_before = sorted((shared / "stack" / "tinker").iterdir())
    metrics_before = (shared / "runs" / "base" / "metrics.jsonl").read_text()
    again = succeeded(run_03(shared, "base-again.ipynb"))
    evaluated_again = succeeded(evaluate(shared, "base-evaluated-again.ipynb"))
    for needle in HELD_OUT_CELLS:
        first = printed(base_evaluated, needle)
        assert "0." in first  # the cell did print scores
        assert printed(evaluated_again, needle) == first, needle
    assert f"has finished its {SMALL_03['steps']} steps" in printed(again, "RunLog(cfg.run_name)")
    assert (shared / "runs" / "base" / "metrics.jsonl").read_text() == metrics_before
    # The only new training client is the run_step check's own (it trains one tiny step on a
    # client of its own, never on the run's): the finished run made none, and 05, whose
    # scores were stored, made none either.
    new_clients = set((shared / "stack" / "tinker").iterdir()) - set(tinker_runs_before)
    assert len(new_clients) == 1


def test_resuming_with_a_changed_hyperparameter_fails_in_one_sentence(
    base: nbformat.NotebookNode, shared: Path
) -> None:
    before = state(shared, "base")
    changed = run_03(shared, "base-changed.ipynb", learning_rate=0.01)
    assert changed.metadata["exit_code"] != 0
    errors = [
        (cell, output)
        for cell in changed.cells
        for output in cell.get("outputs", [])
        if output.output_type == "error"
    ]
    [(cell, error)] = errors
    assert "run.resume(run_settings)" in cell.source
    assert error.ename == "CourseConfigError" and len(error.traceback) == 1
    assert "learning_rate=0.001, not 0.01" in error.evalue
    assert "pick a new run_name" in error.evalue
    assert error.evalue.count(". ") == 0 and error.evalue.endswith(".")  # one sentence
    assert state(shared, "base") == before


def test_try_group_size_2_gives_more_degenerate_groups(
    base: nbformat.NotebookNode, groups_of_2: nbformat.NotebookNode, shared: Path
) -> None:
    small = records(shared, "groups-of-2")
    assert state(shared, "groups-of-2")["settings"]["group_size"] == 2
    assert mean([r["degenerate_pct"] for r in small]) > mean(
        [r["degenerate_pct"] for r in records(shared, "base")]
    )


def test_try_learning_rate_x10_trains_with_ten_times_the_step(
    base: nbformat.NotebookNode, lr_x10: nbformat.NotebookNode, shared: Path
) -> None:
    assert state(shared, "lr-x10")["settings"]["learning_rate"] == 0.01
    trained = [r for r in records(shared, "lr-x10") if not r["skipped"]]
    assert trained and all(r["optim/learning_rate"] == 0.01 for r in trained)
    assert all(
        r["optim/learning_rate"] == 0.001 for r in records(shared, "base") if not r["skipped"]
    )


def test_try_temperature_half_samples_surer_tokens(
    base: nbformat.NotebookNode, temperature_half: nbformat.NotebookNode, shared: Path
) -> None:
    """`optim/entropy` is minus the sampler's mean logprob: lower when it samples colder."""
    assert state(shared, "temperature-0.5")["settings"]["temperature"] == 0.5

    def entropy(run_name: str) -> float:
        return mean([r["optim/entropy"] for r in records(shared, run_name) if not r["skipped"]])

    assert entropy("temperature-0.5") < entropy("base")

    def largest_weight_gap(run_name: str) -> float:
        trained = [r for r in records(shared, run_name) if not r["skipped"]]
        return max(
            max(r["optim/importance_weight_max"] - 1, 1 - r["optim/importance_weight_min"])
            for r in trained
        )

    # The sampler draws from (and reports logprobs of) the tempered distribution; the
    # learner scores at temperature 1: the importance weights leave 1.
    assert largest_weight_gap("temperature-0.5") > 0.01 > 1e-3 > largest_weight_gap("base")


def test_notebook_03_shows_the_figure_and_logs_train_step_metrics(
    base: nbformat.NotebookNode, base_evaluated: nbformat.NotebookNode, shared: Path
) -> None:
    figure_cell = next(c for c in base_evaluated.cells if "summary_figure(run" in c.source)
    assert any("image/png" in o.get("data", {}) for o in figure_cell.outputs)
    trained = [r for r in records(shared, "base") if not r["skipped"]]
    assert trained
    for record in trained:
        assert abs(record["optim/importance_weight_mean"] - 1) < 1e-3  # same weights both sides
        assert record["optim/grad_norm"] > 0 and "optim/kl_sample_train_v2" in record
    scores = state(shared, "base")["eval_after"]["scores"]
    assert set(scores) == {"known facts, not trained", "seen facts, new wording", "unseen facts"}


def test_storage_holds_only_what_the_runs_need(
    base: nbformat.NotebookNode,
    base_evaluated: nbformat.NotebookNode,
    groups_of_2: nbformat.NotebookNode,
    lr_x10: nbformat.NotebookNode,
    temperature_half: nbformat.NotebookNode,
    shared: Path,
) -> None:
    """After four runs: each run's latest training state, no sampler checkpoint, nothing else
    but one run.json per training client (docs/storage.md)."""
    tinker = shared / "stack" / "tinker"
    states = sorted(p.parent.name for p in tinker.glob("*/weights/*/checkpoint.json"))
    last_step = SMALL_03["steps"] - 1  # states are numbered by step, from 0
    assert states == [f"{name}-state-{last_step}" for name in RUN_NAMES]
    assert not list(tinker.glob("*/sampler_weights/*/checkpoint.json"))
    for run_name in RUN_NAMES:
        checkpoint = state(shared, run_name)["checkpoint"].removeprefix("tinker://")
        assert (tinker / checkpoint / "checkpoint.json").exists()
    files = [p for p in tinker.rglob("*") if p.is_file()]
    run_infos = [p for p in files if p.name == "run.json"]
    # One training client per run, and the run_step check's own in each of the five notebook 04
    # runs (the unchanged re-run included, which trained nothing itself); notebook 05's four
    # on the base run (the initial adapter and the trained state, for the held-out scores and
    # for pass@k), which load states but save none.
    assert len(run_infos) == 4 + 5 + 4
    assert sum(p.stat().st_size for p in files) < 4 * 2_000_000
    assert len(files) == 4 * 5 + len(run_infos)  # five files per training state


def test_05_evaluates_another_run_and_names_what_to_run_first(
    lr_x10: nbformat.NotebookNode, shared: Path
) -> None:
    """Try this (05): set `run_name` to another run of notebook 04; one it never trained stops
    in one sentence naming notebook 04, with no traceback and no run folder made."""
    other = succeeded(
        evaluate(shared, "lr-x10-evaluated.ipynb", run_name="lr-x10", pass_at_k_problems=0)
    )
    assert "'lr-x10': " in printed(other, "RunLog(cfg.run_name)")
    assert state(shared, "lr-x10")["eval_after"]["completed_steps"] == SMALL_03["steps"]
    missing = evaluate(shared, "missing.ipynb", run_name="never-trained")
    assert missing.metadata["exit_code"] != 0
    [error] = [o for c in missing.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert error.ename == "CourseRunError" and len(error.traceback) == 1
    assert "run notebooks/04_training_loop.ipynb with run_name = 'never-trained' first" in (
        error.evalue
    )
    assert not (shared / "runs" / "never-trained").exists()
