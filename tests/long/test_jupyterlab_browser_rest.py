"""The notebooks tests/notebooks/test_jupyterlab_browser.py leaves out, as a learner sees them
in JupyterLab in a real browser (Run All, then what is on the screen: tests/browser_support.py
says what is checked): 02, 05, 07, 08, 09 and 10, each at its small sizes. Together about seven
minutes on a two-core machine, too long for CI's `make test-notebooks`. Notebooks 05 and 09 read
a run of 04: papermill makes one first, small, in the runs folder JupyterLab's kernels see.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local_stack.client.supervisor import LocalStack
from tests.browser_support import (
    assert_clean_screen,
    chromium,
    jupyterlab,
    require_chromium,
    run_all,
)
from tests.notebook_support import SMALL_PARAMETERS, kernel_env, run, small, succeeded

RUN_OF_04 = "browser"  # the run 05 evaluates and 09 ships
RUNS = {
    "02_snapshot_and_serve": SMALL_PARAMETERS["02_snapshot_and_serve.ipynb"],
    "05_did_it_learn": small("05_did_it_learn", run_name=RUN_OF_04),
    "07_faster_loops": small("07_faster_loops"),
    # A run name of its own: on 04's, 08 stops in one sentence (it never overwrites a run of
    # 04). Here it once did, and Run All, stopped there, never finished.
    "08_sandboxed_rollouts": small("08_sandboxed_rollouts", run_name="browser-shell"),
    "09_ship_the_adapter": small("09_ship_the_adapter", run_name=RUN_OF_04),
    "10_reward_hacking": small("10_reward_hacking", run_name="browser-loophole"),
}


@pytest.fixture(scope="module")
def lab(local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_chromium()  # before the run of 04
    folder, papermill_out = tmp_path_factory.mktemp("lab"), tmp_path_factory.mktemp("run-04")
    env = kernel_env(folder, COURSE_LOCAL_STACK_DIR=str(local_stack.storage_dir))
    parameters = SMALL_PARAMETERS["04_training_loop.ipynb"] | {"run_name": RUN_OF_04}
    succeeded(run("04_training_loop.ipynb", papermill_out / "04.ipynb", parameters, env))
    with jupyterlab(folder, RUNS, local_stack.storage_dir) as url:
        yield url


@pytest.fixture(scope="module")
def browser(lab: str) -> Iterator[object]:
    with chromium() as browser:
        yield browser


@pytest.mark.parametrize("name", sorted(RUNS))
def test_run_all_in_jupyterlab_shows_a_clean_screen(name: str, lab: str, browser) -> None:
    assert_clean_screen(name, run_all(browser, lab, name))
