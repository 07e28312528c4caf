"""Test-session settings that every test and every notebook kernel inherits.

Runs and the local stack's checkpoints go to a temporary folder, so tests never resume
or overwrite a real run in runs/; the repo is importable from the notebooks' kernels
(nbval starts them in notebooks/); loopback traffic bypasses any proxy.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="course-tests-"))
    os.environ["COURSE_RUNS_DIR"] = str(scratch / "runs")
    os.environ["COURSE_LOCAL_STACK_DIR"] = str(scratch / "local-stack")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    for name in ("NO_PROXY", "no_proxy"):
        os.environ[name] = "127.0.0.1,localhost"
    os.environ.pop("JPY_SESSION_NAME", None)  # notebooks log plain lines, as under papermill


# The one papermill run per notebook with small parameters stays in `make test`: it proves
# each notebook runs end to end (notebook 04's is killed mid-run and re-run, so it proves the
# resume too: tests/test_resume.py). Every other whole-notebook run is a scenario (defaults under
# nbval, faults, kills, exercises, other platforms) and belongs to `make test-notebooks`.
SMOKE_TEST = "test_notebook_runs_with_small_parameters"
SCENARIO_MODULES = {"test_results.py", "test_sweep.py", "test_exercises.py"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every whole-notebook scenario run `notebooks`, so `-m` can split the suite."""
    for item in items:
        runs_a_notebook = (
            item.path.suffix == ".ipynb"  # nbval: the notebook with its defaults
            or item.path.name in SCENARIO_MODULES
            or "run_env" in getattr(item, "fixturenames", ())
        )
        if runs_a_notebook and getattr(item, "originalname", item.name) != SMOKE_TEST:
            item.add_marker(pytest.mark.notebooks)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop the stack the session's kernels and tests shared: stacks outlive their kernels."""
    from local_stack.kernel.supervisor import stop_local_stack

    stop_local_stack()
