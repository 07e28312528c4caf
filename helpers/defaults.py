"""Each backend's defaults for the parameters a notebook leaves as None.

Settings that depend on the model behind the backend: Kimi K2.6 thinks at length, and its
LoRA learning rate is the pinned cookbook's recommendation (`tinker_cookbook/weights/
README.md`: about 5e-4 for Kimi K2.6 LoRA, which `hyperparam_utils.get_lr` does not yet
calibrate; the guide's 1e-5 is a full fine-tuning scale, at which 7 steps barely move the
adapter); the local tiny model answers in ~20 tokens and, with ~100k parameters, takes
1e-3. Sizes that drive a cloud bill default to the guide's own scale there (7 steps) and
a short evaluation; locally they cost nothing, so they are long enough to show learning.
Imports nothing heavy: the check cells use it.
"""

from __future__ import annotations

from typing import Any

# The model's settings, and notebook 04's sizes (`helpers.connect` hands these to every
# notebook as `course.defaults`).
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
        "learning_rate": 5e-4,
        "steps": 7,
        "eval_problems": 50,
        "eval_samples": 2,
    },
}

# Other notebooks' sizes that drive a cloud bill, where they differ from notebook 04's.
NOTEBOOK_DEFAULTS = {
    # Three runs of `steps` and a flex run, 32 rollouts a step; four models evaluated. In
    # the cloud, 5 steps still leave the k = 3 run two steady steps to time.
    "06_faster_loops": {
        "local": {"steps": 8, "flex_steps": 5, "eval_problems": 60, "eval_samples": 4},
        "cloud": {"steps": 5, "flex_steps": 4, "eval_problems": 25, "eval_samples": 2},
    },
    # The short run trained only when there is no run to ship: 64 rollouts a step.
    "08_ship_the_adapter": {
        "local": {"short_run_steps": 12},
        "cloud": {"short_run_steps": 7},
    },
}


def with_defaults(backend: str, notebook: str | None = None, **values: Any) -> dict[str, Any]:
    """`values` with each None replaced by `backend`'s default (`notebook`'s own first): a
    value set explicitly wins."""
    defaults = {**BACKEND_DEFAULTS[backend], **NOTEBOOK_DEFAULTS.get(notebook, {}).get(backend, {})}
    return {name: defaults[name] if value is None else value for name, value in values.items()}
