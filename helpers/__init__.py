"""The course code the notebooks import: the backend seam, parameter checks, the taught modules.

    backend               `connect(backend)` -> `Course`: clients, tokenizer, renderer, data
                          (locally from `local_stack.client.dataset`, made offline)
    notebook_parameters   every parameter declared once; `settings(notebook, globals())`
    params, cost          the rules parameters pass (a leaf); the cloud estimate and cap
    scoring, serving, inspect_step, training, pipelined
                          generated from the notebooks' `# @save` cells (`make helpers`)
    plots, runlog, progress, stats, rollout_failures
                          what the taught loops draw, store, show, measure and guard against
    errors, sdk_noise     one-sentence errors (a cell stopped by a dead local stack too), and
                          quiet SDK notices the course explains
    adapter_export, sail_http, effect_size
                          notebook 08's export (size, disk, conversion), its raw Sail requests
                          (with the table of documented and guessed fields), and when an
                          adapter-vs-base comparison can decide anything

Beside it: `shell_tasks` (notebook 07), `sweeps` (`make sweep`, notebook 05), `kimi` (the
model, named once) and `local_stack`, whose kernel side (`local_stack.client`) only
`helpers.backend` imports, inside the calls that need it: `connect("local")` (which starts
or finds the stack, and watches its server from the kernel), `Course.simulate_latency`,
`tiny_base_model` and `tiny_lora_config`.

`import helpers` is cheap (the SDKs load on first use), so a notebook can check its
parameters in its first cell and fail in a second, not after a minute of imports.
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
