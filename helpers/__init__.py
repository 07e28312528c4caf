"""The course code the notebooks import: the backend seam, the settings, the taught modules.

    backend               `connect(backend)` -> `Course`: clients, tokenizer, renderer, data
    notebook_parameters   every parameter declared once; `settings(notebook, globals())`
    params, logins        the rules parameters pass (a leaf); the cloud logins they check
    scoring, serving, inspect_step, training, pipelined, shipping
                          generated from the notebooks' `# @save` cells (`make helpers`)
    plots, runlog, measurements
                          what the taught loops draw, store and measure
    errors                the course's two error types (`notebook_ui` shows them in a sentence)

Only `helpers.backend` imports the local stack (`local_stack.client`), inside the calls that
need it. `import helpers` is cheap (the SDKs load on first use), so a notebook's check cell
fails in a second, not after a minute of imports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from helpers.errors import install_short_errors

if TYPE_CHECKING:
    from helpers.backend import Course

install_short_errors()


def connect(backend: str = "local") -> Course:
    """Check `backend`, start what it needs, and return clients, tokenizer, renderer and data.

    See `helpers.backend.connect`.
    """
    from helpers.backend import connect as connect_backend

    return connect_backend(backend)


def settings(notebook: str, namespace: Mapping[str, object]) -> Any:
    """`notebook`'s parameters from `namespace` (the check cell passes `globals()`), checked,
    with the backend's defaults filled in, as one frozen object; prints what the run may spend.

    See `helpers.notebook_parameters.settings`.
    """
    from helpers.notebook_parameters import settings as notebook_settings

    return notebook_settings(notebook, namespace)
