"""Executing a course notebook under papermill, and the local stack its kernels share.

Shared by `make sweep` (`sweeps.runner`) and `make run` (`scripts/run_notebooks.py`); it
lives in a package so that `sweeps` runs from any directory once the course is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from local_stack.client.supervisor import ensure_local_stack, running_local_stack, stop_local_stack

ROOT = Path(__file__).resolve().parent.parent
# ipykernel warns at every start that its TCP sockets are not encrypted, and names the fix:
# CurveZMQ keys provisioned by the kernel manager. With "auto", nbclient's kernel manager
# provisions them whenever the kernelspec supports it (ipykernel's does).
KERNEL_CONFIG = {"KernelManager": {"transport_encryption": "auto"}}


@contextmanager
def local_stack_for(backend: str) -> Iterator[None]:
    """On the local backend, a stack for the kernels run meanwhile: the running one, left
    running, or one started first (so no kernel waits for it) and stopped at the end."""
    start_stack = backend == "local" and running_local_stack() is None
    if start_stack:
        ensure_local_stack()
    try:
        yield
    finally:
        if start_stack:
            stop_local_stack()


def execute(notebook: Path, out: Path, parameters: dict) -> None:
    """Run `notebook` on the python3 kernel, in notebooks/, into `out`; raise if a cell fails."""
    # Imported here: papermill (with nbformat's schema checks) costs seconds of CPU, which
    # `python -m sweeps.runner --help` and a grid's parameter check need not pay.
    import papermill
    from traitlets.config import Config

    papermill.execute_notebook(
        str(notebook),
        str(out),
        parameters=parameters,
        cwd=str(ROOT / "notebooks"),
        kernel_name="python3",
        progress_bar=False,
        config=Config(KERNEL_CONFIG),
    )
