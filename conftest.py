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

from scripts.test_durations import DURATIONS_PATH
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
# compares the run 04 made before it, and 09 ships that run.
NOTEBOOKS_IN_ORDER = ("notebooks/04_", "notebooks/05_", "notebooks/09_")


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's, absent under `-p no:xdist`
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile` (the Makefile's) with two changes. nbval's runs of
    `NOTEBOOKS_IN_ORDER` are one unit: one worker runs them in order with one runs/ folder, as
    a learner would; every other notebook is a unit of its own. And the units go out longest
    first, by their seconds in a recorded run (DURATIONS_PATH): xdist's own order (most tests
    first) left slow stack files of a few tests each to start last and run alone at the end."""
    if config.getvalue("dist") != "loadfile":
        return None
    import json
    from collections import OrderedDict

    from xdist.scheduler import LoadFileScheduling

    recorded = json.loads(DURATIONS_PATH.read_text())["seconds"]

    def seconds(scope: str) -> float:
        units = NOTEBOOKS_IN_ORDER if scope == NOTEBOOKS_IN_ORDER[0] else (scope,)
        return sum(took for unit, took in recorded.items() if unit.startswith(units))

    class LongestFirstNotebooksInOrder(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return NOTEBOOKS_IN_ORDER[0] if scope.startswith(NOTEBOOKS_IN_ORDER) else scope

        def _assign_work_unit(self, node) -> None:
            # The queue of units, not the collection, is reordered: a worker is sent indexes
            # into the collection it reported. xdist queued the units most tests first; a
            # stable sort keeps that order among units with no recorded seconds (new files).
            if not getattr(self, "longest_first", False):
                units = sorted(self.workqueue.items(), key=lambda unit: -seconds(unit[0]))
                self.workqueue = OrderedDict(units)
                self.longest_first = True
            super()._assign_work_unit(node)

    return LongestFirstNotebooksInOrder(config, log)
