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

from tests.ast_guard_support import guard_ast_parse

ROOT = Path(__file__).resolve().parent
guard_ast_parse()  # before any test can fail: see tests/ast_guard_support.py


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


# The suite splits by folder: tests/notebooks/ (every test that executes a notebook in a
# kernel) and nbval's runs of notebooks/ with their defaults are `make test-notebooks`;
# tests/long/ (the "Try this" exercises and the loophole study, each minutes of notebook runs
# at the settings its text states) is `make test-long`; tests/stack/, tests/course/ and
# tests/repo/ are `make test`.
FOLDER_MARKS = {
    "notebooks": (ROOT / "tests" / "notebooks", ROOT / "notebooks"),
    "long": (ROOT / "tests" / "long",),
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every item by its folder (`notebooks` or `long`), so `-m` can split too."""
    for item in items:
        for mark, folders in FOLDER_MARKS.items():
            if any(folder in item.path.parents for folder in folders):
                item.add_marker(getattr(pytest.mark, mark))


# nbval's runs of notebooks/ that read what an earlier one left in runs/: 05 at its defaults
# compares the run 04 made before it, and 08 ships that run.
NOTEBOOKS_IN_ORDER = ("notebooks/04_", "notebooks/05_", "notebooks/08_")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile` (the Makefile's) with nbval's runs of `NOTEBOOKS_IN_ORDER` as one
    unit: one worker runs them in order with one runs/ folder, as a learner would. Every
    other notebook is a unit of its own, so that the two workers share the nbval runs (all
    in one unit, they were the run's longest path: 04 at its defaults alone is minutes)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NotebooksInOrder(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return NOTEBOOKS_IN_ORDER[0] if scope.startswith(NOTEBOOKS_IN_ORDER) else scope

    return NotebooksInOrder(config, log)
