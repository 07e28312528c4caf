"""The notebooks as a learner sees them, in JupyterLab in a real browser (Run All, then what is
on the screen: tests/browser_support.py says what is checked), for the notebooks CI can afford:
01, 03, 04 and 06, about two minutes together on a two-core machine. The other six (about seven
minutes more, 05 and 09 after a run of 04) are in tests/long/test_jupyterlab_browser_rest.py,
in `make test-long`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from local_stack.client.supervisor import LocalStack
from tests.browser_support import assert_clean_screen, chromium, jupyterlab, run_all
from tests.notebook_support import SMALL_PARAMETERS, small

# Each notebook with the parameters of its run here (the fixture runs for 06 to compare).
RUNS = {
    "01_scoring": SMALL_PARAMETERS["01_scoring.ipynb"],
    "03_one_grpo_step": small("03_one_grpo_step"),
    "04_training_loop": SMALL_PARAMETERS["04_training_loop.ipynb"] | {"run_name": "browser"},
    "06_compare_runs": {"runs": "fx-*", "smoothing": 3},
}


@pytest.fixture(scope="module")
def lab(local_stack: LocalStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with jupyterlab(tmp_path_factory.mktemp("lab"), RUNS, local_stack.storage_dir) as url:
        yield url


@pytest.fixture(scope="module")
def browser(lab: str) -> Iterator[object]:
    with chromium() as browser:
        yield browser


@pytest.mark.parametrize("name", sorted(RUNS))
def test_run_all_in_jupyterlab_shows_a_clean_screen(name: str, lab: str, browser) -> None:
    assert_clean_screen(name, run_all(browser, lab, name))
