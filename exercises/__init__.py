"""The course's exercises: what each learner-written function must do, its cases, and the
typical mistakes with their hints. One module per notebook; `check.py` is the check itself and
`cells.py` the notebook convention (stub, check, collapsed solution)."""

from __future__ import annotations

import importlib
import pkgutil

from exercises.check import Case, Exercise, Mistake, check

__all__ = ["Case", "Exercise", "Mistake", "all_exercises", "check"]

_FRAMEWORK = {"check", "cells"}


def all_exercises() -> dict[str, Exercise]:
    """Every exercise of every notebook's module, by `notebook/name`, in notebook order."""
    found: dict[str, Exercise] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name in _FRAMEWORK:
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for value in vars(module).values():
            if isinstance(value, Exercise):
                found[f"{value.notebook}/{value.name}"] = value
    return dict(sorted(found.items()))
