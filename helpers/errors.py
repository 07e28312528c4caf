"""One-sentence errors for bad settings.

A workshop attendee who mistypes a parameter should read one sentence that names the
parameter and what is allowed, not forty lines of traceback. Inside IPython, errors of
this type are shown as that sentence alone; everywhere else they are ordinary
`ValueError`s.
"""

from __future__ import annotations

from typing import Any


class CourseConfigError(ValueError):
    """A setting the course cannot run with; the message says which and what is allowed."""


def _show_one_sentence(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset=None):
    stb = [f"{etype.__name__}: {value}"]
    shell._showtraceback(etype, value, stb)  # publishes the error like any other
    return stb


def install_short_errors() -> None:
    """Show `CourseConfigError` as one line in a running IPython kernel (no-op elsewhere)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None:
        shell.set_custom_exc((CourseConfigError,), _show_one_sentence)
