"""The shape of every lesson: a core path that fits a workshop slot, optional depth after it,
check cells a learner can read (no hidden asserts), the guide's reading time for each, and
prose that states no number of one run (those are rendered from the run)."""

from __future__ import annotations

import importlib.util
import re

import pytest

from exercises.cells import SOLUTION_TAG, tagged
from tests.notebook_source import NOTEBOOK_NAMES, NOTEBOOKS, ROOT, cell, cells, guide, numbers

MINE = NOTEBOOK_NAMES
CORE_WORD_LIMIT = 1300
CORE_CODE_LIMIT = 250


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


reading_times = load_script("reading_times")


@pytest.mark.parametrize("name", MINE)
def test_core_path_fits_the_slot(name: str) -> None:
    words = reading_times.core_words(NOTEBOOKS / f"{name}.ipynb")
    assert words <= CORE_WORD_LIMIT, f"{name}: {words} words of core-path prose"


@pytest.mark.parametrize("name", MINE)
def test_core_code_fits_the_slot(name: str) -> None:
    """Non-blank lines of code cells not tagged optional, hidden ones included."""
    lines = reading_times.core_code_lines(NOTEBOOKS / f"{name}.ipynb")
    assert lines <= CORE_CODE_LIMIT, f"{name}: {lines} non-blank lines of core-path code"


@pytest.mark.parametrize("name", MINE)
def test_optional_cells_come_after_the_core_path(name: str) -> None:
    """Once a cell is tagged optional, the markdown after it is optional too, but for the
    closing summary (which must stay last: tests/repo/test_notebook_format.py). Exercises'
    solutions, optional too, stay below their exercises."""
    notebook = cells(name)
    depth = [
        i for i, c in enumerate(notebook) if tagged(c, "optional") and not tagged(c, SOLUTION_TAG)
    ]
    if not depth:
        return
    after = [
        i
        for i, c in enumerate(notebook[depth[0] : -1], depth[0])
        if c.cell_type == "markdown" and "optional" not in c.metadata.get("tags", [])
    ]
    assert not after, f"{name}: core markdown cells {after} come after optional depth"


def source_hidden(notebook_cell) -> bool:
    return notebook_cell.metadata.get("jupyter", {}).get("source_hidden") is True


@pytest.mark.parametrize("name", MINE)
def test_check_cells_show_their_source(name: str) -> None:
    """A `-checked` cell asserts something deterministic about the cells above it, so a
    learner who meets its AssertionError can read what it checked."""
    checks = [
        c for c in cells(name) if c.cell_type == "code" and c.get("id", "").endswith("-checked")
    ]
    assert [c.id for c in checks if source_hidden(c)] == []


ASSERT_STATEMENT = re.compile(r"^\s*assert\b", re.MULTILINE)


@pytest.mark.parametrize("name", MINE)
def test_no_hidden_cell_asserts(name: str) -> None:
    """Claims about random runs are checked by tests that read the executed notebook; an assert
    a learner cannot see has no place in a learner's notebook."""
    hidden = [c for c in cells(name) if c.cell_type == "code" and source_hidden(c)]
    assert [c.id for c in hidden if ASSERT_STATEMENT.search(c.source)] == []


def test_the_guide_gives_each_core_path_its_measured_reading_time() -> None:
    assert reading_times.WORDS_PER_MINUTE in numbers(guide())
    for name in MINE:
        words = reading_times.core_words(NOTEBOOKS / f"{name}.ipynb")
        row = f"| `{name}` | {words:,} | {reading_times.reading_minutes(words)} min |"
        assert row in guide(), f"the guide's reading-time row for {name} should be {row!r}"


def test_run_specific_sentences_are_rendered_cells() -> None:
    """The sentences about one run's outcome in 03 and 08 are built from its values."""
    for name, cell_id in [
        ("03_one_grpo_step", "sides-rendered"),
        ("09_ship_the_adapter", "before-after-rendered"),
    ]:
        assert "Markdown(" in cell(name, cell_id), (name, cell_id)


# Every number the prose of these notebooks states (outside code spans), reviewed: each is a
# constant of the course or its sources (notebook numbers, rewards, parameter values an
# exercise sets, documented limits, exponents, years of papers), never one run's outcome.
# A run's numbers belong in a rendered cell (`Markdown(f"...")`) or an assert instead.
NOTEBOOK_NUMBERS = {f"{n:02d}" for n in range(1, 11)}  # "01" to "10"
REVIEWED_NUMBERS = {
    # Rewards, examples, the exercises' 10 minutes.
    "01_scoring": {"0", "1", "−0.1", "0.1", "0.5", "2", "7", "10", "12", "84"},
    "02_snapshot_and_serve": {"0", "-0.1", "0.3", "1.5", "8", "10", "12", "15", "32", "404"},
    "03_one_grpo_step": {
        "0",
        "0.0",
        "1",
        "3",
        "4",
        "5",  # 5, 8 and 12: the exercises' minutes
        "8",
        "12",
        "0.8",
        "1.2",
        "32",
        "64",
        "2000",
        "0.781",
        "0.0775",
        "2024",
        "2025",
    },  # fmt: skip
    # 04: the five moves' numbering, an example sum, timeouts (10 minutes, 12 hours), the 10-step
    # smoothing, the papers' years and GRPO's section (4.1.2).
    "04_training_loop": {"0", "1", "2", "3", "4", "5", "10", "12", "2024", "2025", "4.1.2"},
    # An example sum, the format penalty, pass@k's 16 answers, bootstrap resamples, the
    # exercise's minutes (5, 7 come from "7 plus 5"), the papers' years.
    "05_did_it_learn": {"0", "0.1", "1", "5", "7", "16", "2,000", "95%", "2021", "2025"},
    # The guide's credit for a cut-off answer.
    "10_reward_hacking": {"0", "0.9"},
    # t and z quantiles, power, the exercise's minutes
    "06_compare_runs": {"0", "1", "2", "1.96", "80%", "95%", "10"},
    # Staleness levels, the default k = 3, the interval's 1.96 and the 80%-power 2.8, the
    # check's 4 steps per level, the SDK's 20 s poll and a 2 s batch, notebook 02's rollout
    # timeouts (12 hours, 10 minutes), the cookbook's version.
    "07_faster_loops": set("0 1 2 3 4 5 10 12 20 1.96 2.8 95% 0.5.8".split()),
    # Rewards, exit code 124, `kill -9 1`, `chmod 444`, the exercise's 30 s sleep and 5 s
    # timeout, the containment rows' sizes (8 x 200 MiB = 1.6 GiB, 8 x 100 MiB = 800 MiB, the
    # 1,000 bytes asked for, `sleep 300`, PID 3) and the local sandbox's ResourceLimits
    # (1 GiB, 256 MiB, 16,384 files, 128 processes, 60 s, 64 MiB; held by
    # tests/repo/test_notebook_08_limits.py), a Sailbox size "s" (1 vCPU, 16 GiB, 32 GiB),
    # four scripted replies (log(1/4)), the cookbook's version.
    "08_sandboxed_rollouts": set(
        "0 1 -9 2 3 4 5 8 16 30 32 60 64 100 124 128 200 256 300 444 800 1.6 1,000 16,384 "
        "0.5.8".split()
    ),
    # 08: the asserted tolerance, a rank, an HTTP status, the interval's 95%
    "09_ship_the_adapter": {"0", "1", "1e-4", "64", "409", "95%"},
}


@pytest.mark.parametrize("name", MINE)
def test_prose_states_only_reviewed_numbers(name: str) -> None:
    prose = [c for c in cells(name) if c.cell_type == "markdown" and not tagged(c, SOLUTION_TAG)]
    text = "\n".join(c.source for c in prose)
    text = re.sub(r"`[^`]*`", "", text)  # code spans name things; they state no outcome
    numbers = set(re.findall(r"(?<![\w.])[-+−]?\d+(?:[.,]\d+)*(?:e-?\d+)?%?", text))
    unreviewed = numbers - REVIEWED_NUMBERS[name] - NOTEBOOK_NUMBERS
    assert not unreviewed, f"{name} states {sorted(unreviewed)}: render them from the run"
