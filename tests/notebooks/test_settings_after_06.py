"""Notebook 06 simulates cloud waits for its own kernel only: while it runs on the session's
stack, its kernel (and only it) has the simulated latency, and once the kernel has shut down,
nobody has it. The per-client settings themselves: tests/stack/test_kernel_settings.py.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat

from local_stack import config, registry
from local_stack.client.control_client import get_knobs
from tests.knobs_support import config_of, stack_default
from tests.notebook_support import small
from tests.wait_support import wait_until

ROOT = Path(__file__).resolve().parents[2]
HANG_SECONDS = 120.0  # a bound against a hang only, never a claim about speed
# Notebook 06's small run, with the two simulated latencies set to different values, so that
# the test can see the kernel use each.
NOTEBOOK_06_SMALL = small("06_faster_loops", balanced_latency_s=2.0, run_name="settings-06")


def test_after_notebook_06_another_kernel_gets_the_stacks_defaults(local_stack, tmp_path) -> None:
    """Notebook 06 shares this session's stack. While it runs, its kernel (and only it) has
    the simulated latency; once the kernel has shut down, nobody has it."""
    env = {
        **os.environ,
        "COURSE_RUNS_DIR": str(tmp_path / "runs"),
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "PYTHONPATH": str(ROOT),
    }
    out = tmp_path / "06.ipynb"
    args = [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / "06_faster_loops.ipynb")]
    args += [str(out), "--cwd", str(ROOT / "notebooks"), "--kernel", "python3"]
    for name, value in NOTEBOOK_06_SMALL.items():
        args += ["-p", name, str(value)]
    run = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    seen_kernel_latencies: set[float] = set()
    try:
        while run.poll() is None:
            for client in kernel_clients(local_stack.storage_dir):
                seen_kernel_latencies.add(config_of(local_stack.url, client)["latency"])
            assert get_knobs(local_stack.url) == stack_default()  # this client: untouched
            time.sleep(0.2)
    finally:
        log = run.communicate(timeout=HANG_SECONDS)[0].decode(errors="replace")
    assert run.returncode == 0, log[-3000:]
    assert error_free(out)
    simulated = {NOTEBOOK_06_SMALL["balanced_latency_s"], NOTEBOOK_06_SMALL["flex_latency_s"]}
    assert simulated <= seen_kernel_latencies  # it did simulate, in both windows
    # papermill can return while its kernel is still exiting: wait for the kernel to be gone.
    wait_until(lambda: not kernel_clients(local_stack.storage_dir), "06's kernel to shut down")
    assert config_of(local_stack.url, "anotherkernel") == stack_default()
    assert get_knobs(local_stack.url) == stack_default()


def kernel_clients(storage_dir: Path) -> set[str]:
    """The clients registered with the stack other than this test process."""
    return registry.live_client_names(storage_dir) - {config.process_client()}


def error_free(executed: Path) -> bool:
    notebook = nbformat.read(executed, as_version=4)
    return not [o for c in notebook.cells for o in c.get("outputs", []) if "ename" in o]
