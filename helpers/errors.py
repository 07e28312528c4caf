"""The course's two error types: a setting it cannot run with, a run that cannot go on. In
IPython they show as one sentence, as `budget.cost`'s OverBudgetError and interruptions do
(`notebook_ui.short_errors`).
"""

from __future__ import annotations

from budget.cost import OverBudgetError
from notebook_ui import short_errors


class CourseConfigError(ValueError):
    """A setting the course cannot run with; the message says which and what is allowed."""


class CourseRunError(RuntimeError):
    """A run that cannot go on; the message says why and what to do next."""


def install_short_errors() -> None:
    """Show the course's errors as one line in a running IPython kernel (no-op elsewhere)."""
    short_errors.install_short_errors((CourseConfigError, CourseRunError, OverBudgetError))
