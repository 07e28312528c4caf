"""Each backend's defaults for the parameters a notebook leaves as None.

They are declared with the parameters (`helpers.notebook_parameters`): settings that depend
on the model behind the backend (Kimi K2.6 thinks at length and needs the guide's small
learning rate; the tiny local model answers in ~20 tokens and needs a much larger one), and
sizes that drive a cloud bill, which default to the guide's own scale there and are long
enough to show learning locally, where they cost nothing. Imports nothing heavy.
"""

from __future__ import annotations

from typing import Any

from helpers.notebook_parameters import NOTEBOOK_PARAMETERS

# Notebook 04's parameters set the model's settings and the training loop's sizes, which
# `helpers.connect` hands to every notebook as `course.defaults`.
LOOP_NOTEBOOK = "04_training_loop"


def _defaults(notebook: str, backend: str) -> dict[str, Any]:
    return {
        name: parameter.default(backend)
        for name, parameter in NOTEBOOK_PARAMETERS[notebook].items()
        if parameter.value is None
    }


BACKEND_DEFAULTS = {backend: _defaults(LOOP_NOTEBOOK, backend) for backend in ("local", "cloud")}
# Every notebook's defaults, where it has parameters that may be None.
NOTEBOOK_DEFAULTS = {
    notebook: {backend: _defaults(notebook, backend) for backend in ("local", "cloud")}
    for notebook in NOTEBOOK_PARAMETERS
    if _defaults(notebook, "local")
}


def with_defaults(backend: str, notebook: str | None = None, **values: Any) -> dict[str, Any]:
    """`values` with each None replaced by `backend`'s default (`notebook`'s own first, then
    the training loop's): a value set explicitly wins."""
    defaults = {**BACKEND_DEFAULTS[backend], **NOTEBOOK_DEFAULTS.get(notebook, {}).get(backend, {})}
    return {name: defaults[name] if value is None else value for name, value in values.items()}
