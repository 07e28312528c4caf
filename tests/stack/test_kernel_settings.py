"""Simulated latencies and injected faults belong to the client (kernel) that set them.

One stack serves every kernel, so a setting one kernel makes must neither reach another
kernel nor outlive it: notebook 06 simulates cloud waits for its own runs only and undoes
them however a run ends, and the stack forgets a client's settings once its process has
left. The start-up settings from the environment stay every client's default.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from helpers.backend import Course
from local_stack import config, registry
from local_stack.control.knobs import MAX_CLIENTS_WITH_SETTINGS, ClientKnobs, Knobs
from local_stack.control.routes import DEPARTED_CHECK_SECONDS
from local_stack.kernel.control_client import get_knobs, reset_knobs, set_knobs

ROOT = Path(__file__).resolve().parents[2]
WAIT_SECONDS = 120.0
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# Notebook 06's small run in tests/test_pipelining.py, with the two simulated latencies set
# to different values, so that the test can see the kernel use each.
NOTEBOOK_06_SMALL = {
    "steps": 4,
    "group_size": 4,
    "groups_per_step": 2,
    "max_staleness": 2,
    "balanced_latency_s": 2.0,
    "flex_latency_s": 3.0,
    "flex_steps": 3,
    "eval_problems": 4,
    "eval_samples": 1,
    "run_name": "settings-06",
}


def stack_default() -> dict:
    """The settings every client gets unless it set its own: the stack's start-up ones."""
    return Knobs.from_settings(config.knob_settings_from_env()).as_dict()


def config_of(url: str, client: str) -> dict:
    """What `client`'s requests get, asked with its own key."""
    request = urllib.request.Request(
        f"{url}/local/config",
        headers={"Authorization": f"Bearer {config.SAIL_KEY_PREFIX}{client}"},
    )
    with NO_PROXY.open(request, timeout=30) as reply:
        return json.load(reply)


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, f"still waiting for {what}"
        time.sleep(0.2)


def test_each_client_has_its_own_latency_and_faults() -> None:
    knobs = ClientKnobs(Knobs(latency=1.5))
    knobs.update("kernela", {"latency": 4.0, "faults": {"failed": 0.5}})
    assert knobs.of("kernela").latency == 4.0 and knobs.of("kernela").faults == {"failed": 0.5}
    assert knobs.of("kernelb").as_dict() == Knobs(latency=1.5).as_dict()
    knobs.reset("kernela")
    assert knobs.of("kernela").as_dict() == Knobs(latency=1.5).as_dict()


def test_a_refused_change_changes_nothing_for_anyone() -> None:
    knobs = ClientKnobs(Knobs())
    knobs.update("kernela", {"train_latency": 2.0})
    with pytest.raises(ValueError, match="seed"):
        knobs.update("kernela", {"latency": 3.0, "seed": -1})
    with pytest.raises(ValueError, match="faults"):
        knobs.update("kernela", {"seed": 5, "faults": {"failed": 2}})
    assert knobs.of("kernela").as_dict() == Knobs(train_latency=2.0).as_dict()
    assert knobs.default.as_dict() == Knobs().as_dict()


def test_the_seed_is_the_stacks_and_restarts_its_streams() -> None:
    """One random stream samples every client's batch, so the seed cannot be a client's."""
    knobs = ClientKnobs(Knobs())
    seeds: list[int] = []
    knobs.default.on_reseed(seeds.append)
    knobs.update("kernela", {"seed": 7, "latency": 1.0})
    assert seeds == [7]
    assert knobs.of("kernelb").seed == 7 and knobs.of("kernelb").latency == 0.0
    assert knobs.of("kernela").seed == 7 and knobs.of("kernela").latency == 1.0


def test_setting_the_defaults_keeps_nothing_and_made_up_clients_are_bounded() -> None:
    knobs = ClientKnobs(Knobs())
    for number in range(MAX_CLIENTS_WITH_SETTINGS + 10):
        knobs.update(f"c{number}", {"latency": 1.0})
    assert len(knobs._own) == MAX_CLIENTS_WITH_SETTINGS
    assert knobs.of("c0").latency == 0.0 and knobs.of(f"c{number}").latency == 1.0
    knobs.update(f"c{number}", {"latency": 0.0})  # back to the defaults: nothing kept
    assert f"c{number}" not in knobs._own


def test_over_http_a_client_sees_and_changes_only_its_own_settings(local_stack) -> None:
    mine = config.process_client()
    set_knobs(local_stack.url, latency=2.5, faults={"http500": 0.25})
    try:
        assert config_of(local_stack.url, mine)["latency"] == 2.5
        assert config_of(local_stack.url, "otherkernel") == stack_default()
    finally:
        assert reset_knobs(local_stack.url) == stack_default()
    assert get_knobs(local_stack.url) == stack_default()


def test_simulated_latency_is_undone_however_the_block_ends(local_stack) -> None:
    with pytest.raises(RuntimeError, match="a cell failed"):
        with course_on("local").simulated_latency(latency=3.0, train_latency=1.0):
            assert get_knobs(local_stack.url)["latency"] == 3.0
            raise RuntimeError("a cell failed")
    assert get_knobs(local_stack.url) == stack_default()
    with course_on("cloud").simulated_latency(latency=3.0):
        assert get_knobs(local_stack.url) == stack_default()  # the cloud's waits are real


def course_on(backend: str) -> Course:
    """A Course with only its backend set: all `simulated_latency` reads."""
    course = Course.__new__(Course)
    course.backend = backend
    return course


KILLED_KERNEL = """
import sys, time
from local_stack import config
from local_stack.kernel.control_client import set_knobs
from local_stack.kernel.supervisor import start_local_stack

set_knobs(start_local_stack().url, latency=4.0)
print(config.process_client(), flush=True)
time.sleep(600)
"""


def test_a_killed_kernels_settings_are_forgotten(local_stack) -> None:
    """No `finally` runs in a kernel killed with SIGKILL; the stack forgets its settings once
    the registry shows its process gone."""
    kernel = subprocess.Popen(
        [sys.executable, "-c", KILLED_KERNEL],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        client = kernel.stdout.readline().strip()
        assert config_of(local_stack.url, client)["latency"] == 4.0
        # The stack notices a client only once it has seen it registered.
        time.sleep(2 * DEPARTED_CHECK_SECONDS)
    finally:
        kernel.send_signal(signal.SIGKILL)
        kernel.wait()
    wait_until(
        lambda: config_of(local_stack.url, client) == stack_default(),
        "the killed kernel's settings to be forgotten",
    )


@pytest.mark.notebooks  # a whole-notebook scenario (make test-notebooks), about a minute
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
        log = run.communicate(timeout=WAIT_SECONDS)[0].decode(errors="replace")
    assert run.returncode == 0, log[-3000:]
    assert error_free(out)
    simulated = {NOTEBOOK_06_SMALL["balanced_latency_s"], NOTEBOOK_06_SMALL["flex_latency_s"]}
    assert simulated <= seen_kernel_latencies  # it did simulate, in both windows
    # papermill can return while its kernel is still exiting: wait for the kernel to be gone.
    deadline = time.monotonic() + WAIT_SECONDS
    while kernel_clients(local_stack.storage_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert kernel_clients(local_stack.storage_dir) == set()  # the kernel has shut down
    assert config_of(local_stack.url, "anotherkernel") == stack_default()
    assert get_knobs(local_stack.url) == stack_default()


def kernel_clients(storage_dir: Path) -> set[str]:
    """The clients registered with the stack other than this test process."""
    return registry.live_client_names(storage_dir) - {config.process_client()}


def error_free(executed: Path) -> bool:
    notebook = nbformat.read(executed, as_version=4)
    return not [o for c in notebook.cells for o in c.get("outputs", []) if "ename" in o]
