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


# The suite splits by folder: tests/notebooks/ (every test that executes a notebook in a
# kernel) and nbval's runs of notebooks/ with their defaults are `make test-notebooks`;
# tests/stack/, tests/course/ and tests/repo/ are `make test`.
NOTEBOOK_FOLDERS = (ROOT / "tests" / "notebooks", ROOT / "notebooks")
# A notebook whose run with every default is a test's, which reads what that run shows and
# stores: when that test is collected, nbval does not run the notebook a second time.
DEFAULTS_RUN_BY_TEST = {
    ROOT / "notebooks" / "04_training_loop.ipynb": ROOT / "tests/notebooks/test_loophole.py",
}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave out nbval's run of a notebook that a collected test runs with its defaults (see
    DEFAULTS_RUN_BY_TEST); mark every item collected under a notebook folder `notebooks`, so
    `-m` can split too; and tell pytest-xdist's workers (`make test` and `make test-notebooks`
    run `-n 2 --dist loadgroup`) what must stay together: `xdist_group`, see `_worker_group`."""
    collected = {item.path for item in items}
    run_by_test = [i for i in items if DEFAULTS_RUN_BY_TEST.get(i.path) in collected]
    if run_by_test:
        config.hook.pytest_deselected(items=run_by_test)
        items[:] = [item for item in items if item not in run_by_test]
    for item in items:
        if any(folder in item.path.parents for folder in NOTEBOOK_FOLDERS):
            item.add_marker(pytest.mark.notebooks)
        group = _worker_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))


def _worker_group(item: pytest.Item) -> str | None:
    """The items that one worker must run: a notebook's nbval cells (one kernel runs them in
    order), and a module's tests that use any of its module-scoped fixtures (each worker that
    ran one of them would set the fixture up again; some run a whole notebook, and fixtures
    are often built from one another, e.g. on one shared folder)."""
    if item.path.suffix == ".ipynb":
        return item.path.name
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    if any(each[-1].scope == "module" for each in definitions):
        return item.nodeid.split("::")[0]
    return None
