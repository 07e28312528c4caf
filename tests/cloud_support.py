"""Running a notebook with `backend="cloud"` against a local stack.

The `local_stack` fixture points the real SDKs' URLs and keys at a local server; what the
cloud path still needs and this machine lacks (orca-math, the Kimi tokenizer's remote code,
Sailboxes) an IPython startup file supplies (`scripts/cloud_stand_ins.py`), so the notebook
itself runs unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

from scripts.cloud_stand_ins import write_kernel_startup


def cloud_kernel_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment for a papermill run on the cloud path: the process's own (which the
    `local_stack` fixture pointed at its server), a kernel that loads the stand-ins first,
    runs under `tmp_path/runs`, and `extra`."""
    env = {
        **os.environ,
        "IPYTHONDIR": str(write_kernel_startup(tmp_path / "ipython")),
        "COURSE_RUNS_DIR": str(tmp_path / "runs"),
        **extra,
    }
    env.pop("JPY_SESSION_NAME", None)
    return env
