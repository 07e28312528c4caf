"""What a reader sees in the browser: notebook 05 counts seeds, not runs, and notebook 04's
per-step lines fit a JupyterLab output area without breaking inside a word."""

from __future__ import annotations

import pandas as pd
import pytest

from helpers.progress import CONTINUATION, FIELD_SEPARATOR, LINE_CHARS, StepProgress, fit_fields
from sweeps.compare import by_setting, seed_spread

GAIN = "unseen facts gain"


def runs_table(rows: dict[str, tuple[float, int, float]]) -> pd.DataFrame:
    """Runs by name: (learning_rate, seed, gain)."""
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=["learning_rate", "seed", GAIN])
    return frame.rename_axis("run")


def test_two_runs_with_the_same_seed_are_one_seed() -> None:
    table = runs_table({"a": (1e-3, 0, 0.10), "b": (1e-3, 0, 0.14)})
    # Nothing differs between them, not even the seed: one seed, nothing to measure.
    [group] = by_setting(table, GAIN, []).values()
    assert len(group) == 1 and group.iloc[0] == pytest.approx(0.12)
    spread, freedom = seed_spread(table, GAIN, [])
    assert freedom == 0 and spread != spread  # NaN


def test_repeats_of_a_seed_are_averaged_before_the_spread() -> None:
    table = runs_table({"a": (1e-3, 0, 0.10), "b": (1e-3, 0, 0.14), "c": (1e-3, 1, 0.20)})
    [group] = by_setting(table, GAIN, ["seed"]).values()
    assert sorted(group) == pytest.approx([0.12, 0.20])  # two seeds, not three runs
    spread, freedom = seed_spread(table, GAIN, ["seed"])
    assert freedom == 1 and spread == pytest.approx(abs(0.20 - 0.12) / 2**0.5)


def notebook_04_line(skipped: bool) -> str:
    """A step line as notebook 04 prints it, at its widest values."""
    line = (
        "step 999 | reward -0.999 | correct 1.00 | format 1.00 | degenerate 100% | "
        "datums 999 | dropped 999 | save 99.9s sample 999.9s train 99.9s"
    )
    return line + ("  (skipped: all groups degenerate)" if skipped else "")


@pytest.mark.parametrize("skipped", [False, True])
def test_a_step_line_is_broken_between_fields_only(skipped: bool) -> None:
    line = notebook_04_line(skipped)
    assert len(line) > LINE_CHARS  # what used to wrap inside a word
    lines = fit_fields(line)
    assert len(lines) > 1 and all(len(part) <= LINE_CHARS for part in lines)
    rejoined = FIELD_SEPARATOR.join(part.removeprefix(CONTINUATION) for part in lines)
    assert rejoined == line  # every field whole, in order


def test_a_short_line_is_left_as_it_is(capsys) -> None:
    progress = StepProgress(total=2)
    progress.step_done("step 0 | reward +0.100")
    progress.step_done(notebook_04_line(skipped=False))
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[1/2] step 0 | reward +0.100"
    assert printed[1].startswith("[2/2] step 999 | ") and printed[2].startswith(CONTINUATION)
