"""Progress that suits where the notebook runs: a tqdm bar in JupyterLab (which sets
`JPY_SESSION_NAME`), a plain line per step elsewhere (papermill would store a frozen widget).
A loop's progress remembers the cell that last used it, so that when the cell is interrupted
`notebook_ui.short_errors` can close the bar and say how far the loop got.
"""

from __future__ import annotations

import math
import os

# About what a JupyterLab output area shows on one line in a 1400 px wide window with the
# file browser open (13 px monospace), less the "[step/total] " prefix.
LINE_CHARS = 100
FIELD_SEPARATOR = " | "
CONTINUATION = "    "


def is_interactive() -> bool:
    return "JPY_SESSION_NAME" in os.environ


def _current_cell() -> int | None:
    """The running cell's execution count in an IPython kernel; None elsewhere."""
    from IPython import get_ipython  # installed with ipykernel (requirements.txt)

    shell = get_ipython()
    return None if shell is None else shell.execution_count


# Step lines a loop shows, whatever its length (every step's metrics are in its run's files).
SHOWN_LINES = 10

# The progress that was created or advanced most recently, and the cell that did it.
_latest: tuple[StepProgress, int | None] | None = None


class StepProgress:
    """Advance one step at a time, with a line of metrics for about `SHOWN_LINES` of the
    steps (every step of a short loop), the last one always; a loop that stops early shows
    its last step's line when it is closed."""

    def __init__(self, total: int, done: int = 0, desc: str = "training") -> None:
        self.total, self.done = total, done
        self.every = max(1, math.ceil(total / SHOWN_LINES))
        self._unshown: str | None = None
        self._bar = None
        if is_interactive():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=done, desc=desc)
        self._mark_in_use()

    def step_done(self, line: str) -> None:
        self.done += 1
        self._unshown = "\n".join(fit_fields(line))
        if self.done % self.every == 0 or self.done >= self.total:
            self._show()
        if self._bar is not None:
            self._bar.update(1)
        self._mark_in_use()

    def close(self) -> None:
        # Idempotent. Short of `total`, tqdm's notebook bar turns red: stopped early.
        self._show()
        if self._bar is not None:
            self._bar.close()

    def _show(self) -> None:
        if self._unshown is None:
            return
        if self._bar is None:
            print(f"[{self.done}/{self.total}] {self._unshown}", flush=True)
        else:
            self._bar.write(self._unshown)
        self._unshown = None

    def _mark_in_use(self) -> None:
        global _latest
        _latest = (self, _current_cell())


def fit_fields(line: str, width: int = LINE_CHARS) -> list[str]:
    """`line` in lines of at most `width` characters (JupyterLab breaks a wider one anywhere),
    broken only between its " | " fields, the later lines indented; a wider field stands alone."""
    fields = line.split(FIELD_SEPARATOR)
    lines = [fields[0]]
    for field in fields[1:]:
        joined = lines[-1] + FIELD_SEPARATOR + field
        if len(joined) <= width:
            lines[-1] = joined
        else:
            lines.append(CONTINUATION + field)
    return lines


def stop_loop_of_this_cell() -> str | None:
    """Close the running cell's unfinished loop (one that closed its bar in a `finally` too)
    and say how far it got; None if the loop finished or an earlier cell left it over."""
    if _latest is None or _latest[1] != _current_cell() or _latest[0].done >= _latest[0].total:
        return None
    progress = _latest[0]
    progress.close()
    return (
        f"interrupted after {progress.done} of {progress.total} steps; "
        "run the notebook again to resume"
    )
