"""Each backend's defaults for the parameters a notebook leaves as None.

Settings that depend on the model behind the backend: Kimi K2.6 thinks at length and
needs the guide's small learning rate; the local tiny model answers in ~20 tokens and,
with ~100k parameters, needs a much larger one. Sizes that drive a cloud bill default to
the guide's own scale there (7 steps) and a short evaluation; locally they cost nothing,
so they are long enough to show learning. Imports nothing heavy: the check cell uses it.
"""

from __future__ import annotations

from typing import Any

BACKEND_DEFAULTS = {
    "local": {
        "max_tokens": 24,
        "learning_rate": 1e-3,
        "steps": 90,
        "eval_problems": 100,
        "eval_samples": 4,
    },
    "cloud": {
        "max_tokens": 1024,
        "learning_rate": 1e-5,
        "steps": 7,
        "eval_problems": 50,
        "eval_samples": 2,
    },
}


def with_defaults(backend: str, **values: Any) -> dict[str, Any]:
    """`values` with each None replaced by `backend`'s default: a value set explicitly wins."""
    defaults = BACKEND_DEFAULTS[backend]
    return {name: defaults[name] if value is None else value for name, value in values.items()}
