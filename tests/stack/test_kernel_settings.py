"""Simulated latencies and injected faults belong to the client (kernel) that set them.

One stack serves every kernel, so a setting one kernel makes must neither reach another
kernel nor outlive it: notebook 07 simulates cloud waits for its own runs only and undoes
them however a run ends, and the stack forgets a client's settings once its process has
left. The start-up settings from the environment stay every client's default.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.backend import Course
from local_stack import config
from local_stack.client.control_client import get_knobs, reset_knobs, set_knobs
from local_stack.control.knobs import MAX_CLIENTS_WITH_SETTINGS, ClientKnobs, Knobs
from local_stack.departures import DEPARTED_CHECK_SECONDS
from tests.knobs_support import config_of, stack_default
from tests.wait_support import wait_until

ROOT = Path(__file__).resolve().parents[2]


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
from local_stack.client.control_client import set_knobs
from local_stack.client.supervisor import start_local_stack

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
        give_up_after=120,
    )
