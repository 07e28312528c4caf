"""Notebook 03 runs unchanged with backend="cloud" against the local stack (its last "Try
this"), and prints what that bullet asks about."""

from __future__ import annotations

from pathlib import Path

import nbformat

from tests.cloud_support import cloud_kernel_env
from tests.notebook_support import finish, papermill, small

NOTEBOOK = "03_one_grpo_step.ipynb"


def outputs(path: Path) -> tuple[str, list]:
    """All printed text of an executed notebook, and its error outputs."""
    cells = nbformat.read(path, as_version=4).cells
    found = [o for c in cells for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in found)
    return text, [o for o in found if o.output_type == "error"]


def test_cloud_backend_runs_unchanged_against_the_local_stack(local_stack, tmp_path: Path) -> None:
    """backend="cloud" with the SDKs' endpoints pointed at a local stack (as the
    `local_stack` fixture leaves them): the notebook is not changed, only its kernel gets
    the cloud stand-ins (tests/cloud_support.py)."""
    env = cloud_kernel_env(tmp_path)
    assert env["TINKER_BASE_URL"] == env["SAIL_API_URL"] == local_stack.url
    out = tmp_path / NOTEBOOK
    # The small profile's groups (it sets no max_tokens: the cloud's default stays): the bullet
    # changes the backend, not the sizes, and 14 rollouts show what 128 did.
    parameters = small(NOTEBOOK, backend="cloud")
    code, log = finish(papermill(NOTEBOOK, out, parameters, env))
    assert code == 0, log[-3000:]
    text, errors = outputs(out)
    assert not errors
    assert "backend cloud, learning rate 0.0005, max_tokens 1024" in text
    assert "mean change" in text and "PEFT agrees" in text
    assert "completion tokens; weights from" in text  # what the bullet asks about, printed
