"""Running a notebook with `backend="cloud"` against a local stack.

The `local_stack` fixture points the real SDKs' URLs and keys at a local server; what the
cloud path still needs and this machine lacks (orca-math, the Kimi tokenizer's remote code,
Sailboxes) an IPython startup file supplies (`scripts/cloud_stand_ins.py`), so the notebook
itself runs unchanged.
"""

from __future__ import annotations

from pathlib import Path

from tests.notebook_support import kernel_env


def cloud_kernel_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """`kernel_env` on the cloud path: the process's own SDK settings, the stand-ins loaded
    first, runs under `tmp_path/runs`, and `extra`."""
    return kernel_env(tmp_path, cloud=True, **extra)
