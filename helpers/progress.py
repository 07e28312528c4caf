"""Progress that suits where the notebook runs.

In JupyterLab a tqdm bar fills as steps finish. Under papermill (or any run with no one
watching) a bar would be stored as a frozen widget, so each step is one plain log line
instead. JupyterLab marks its kernels with `JPY_SESSION_NAME`; papermill does not.
"""

from __future__ import annotations

import os


def is_interactive() -> bool:
    return "JPY_SESSION_NAME" in os.environ


class StepProgress:
    """Advance one step at a time, with one line of metrics per step."""

    def __init__(self, total: int, done: int = 0, desc: str = "training") -> None:
        self.total, self.done = total, done
        self._bar = None
        if is_interactive():
            from tqdm.auto import tqdm

            self._bar = tqdm(total=total, initial=done, desc=desc)

    def step_done(self, line: str) -> None:
        self.done += 1
        if self._bar is None:
            print(f"[{self.done}/{self.total}] {line}", flush=True)
        else:
            self._bar.write(line)
            self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
