"""The training loop's per-step lines (`notebook_ui.progress`) fit a JupyterLab output area
without breaking inside a field."""

from __future__ import annotations

import pytest

from notebook_ui.progress import CONTINUATION, FIELD_SEPARATOR, LINE_CHARS, StepProgress, fit_fields


def widest_step_line(skipped: bool) -> str:
    """A step line as notebook 04 prints it, at its widest values."""
    line = (
        "step 999 | reward -0.999 | correct 1.00 | format 1.00 | degenerate 100% | "
        "datums 999 | dropped 999 | save 99.9s sample 999.9s train 99.9s"
    )
    return line + ("  (skipped: all groups degenerate)" if skipped else "")


@pytest.mark.parametrize("skipped", [False, True])
def test_a_step_line_is_broken_between_fields_only(skipped: bool) -> None:
    line = widest_step_line(skipped)
    assert len(line) > LINE_CHARS  # what used to wrap inside a word
    lines = fit_fields(line)
    assert len(lines) > 1 and all(len(part) <= LINE_CHARS for part in lines)
    rejoined = FIELD_SEPARATOR.join(part.removeprefix(CONTINUATION) for part in lines)
    assert rejoined == line  # every field whole, in order


def test_a_short_line_is_left_as_it_is(capsys) -> None:
    progress = StepProgress(total=2)
    progress.step_done("step 0 | reward +0.100")
    progress.step_done(widest_step_line(skipped=False))
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "[1/2] step 0 | reward +0.100"
    assert printed[1].startswith("[2/2] step 999 | ") and printed[2].startswith(CONTINUATION)
