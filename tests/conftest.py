"""The suite's shared fixtures: one local stack per test session (per pytest-xdist worker), in
the session's temporary storage dir (see the root conftest.py), which the notebooks' kernels
under nbval share; and
a notebook run's own environment. Shared code that is not a fixture is in tests/*_support.py."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kimi import offline_kimi_renderer
from local_stack.client.supervisor import (
    LocalStack,
    server_processes,
    start_local_stack,
    stop_local_stack,
)
from tests.notebook_support import kernel_env
from tests.sweep_support import write_fixture_runs

SESSION_MARKER = "COURSE_TEST_SESSION"  # in the environment of everything this session starts


@pytest.fixture(scope="session")
def local_stack() -> Iterator[LocalStack]:
    """The local Sail + Tinker server, SDK environment pointed at it; stopped at session end."""
    yield start_local_stack()
    stop_local_stack()


@pytest.fixture(scope="session")
def renderer():
    """The real kimi_k26 renderer on the offline Kimi K2.6 tokenizer."""
    return offline_kimi_renderer()


@pytest.fixture(scope="session")
def base():
    """The tiny base model and its vocabulary (one thread, as the local stack runs it)."""
    # Imported here, not at the top: torch, transformers and peft cost about 5 s of CPU, which
    # pytest-xdist's controller (it loads this file but runs no test) need not pay.
    import torch

    from local_stack.engine.model import load_base_model

    torch.set_num_threads(1)
    return load_base_model()


@pytest.fixture
def run_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment of one local notebook run (`kernel_env(tmp_path)`): its own runs/ and
    stack folders, fake keys set. The stack its kernel starts outlives the kernel: stopped here."""
    yield kernel_env(tmp_path)
    stop_local_stack(tmp_path / "stack")


@pytest.fixture
def shared_stack_env(local_stack: LocalStack, tmp_path: Path) -> dict[str, str]:
    """`run_env`, but its kernel joins the session's stack rather than starting its own (about
    10 s a run): for runs whose point is not the stack, which write nothing a test reads to
    the stack's folder and set no stack setting (a stack with other settings is refused)."""
    return kernel_env(tmp_path, COURSE_LOCAL_STACK_DIR=str(local_stack.storage_dir))


@pytest.fixture(autouse=True)
def no_watch_outlives_its_test() -> Iterator[None]:
    """A test that calls `connect("local")` in this process starts a watch that stops the
    process, as it stops a script, once the stack is dead or stuck; it must not outlive the
    test and stop a later one, when that test stops or freezes a stack on purpose."""
    yield
    if (attach := sys.modules.get("local_stack.client.attach")) is not None:
        attach.stop_watching()


@pytest.fixture
def fixture_runs(tmp_path: Path) -> Path:
    """Finished runs written by hand (tests/sweep_support.py), in `tmp_path/runs`."""
    return write_fixture_runs(tmp_path / "runs")


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    """Mark everything this run starts with the pid of the process that runs the session: under
    pytest-xdist the controller, whose workers inherit the mark (each worker has its own
    storage dir, so its own session stack: see the root conftest.py)."""
    if not _is_xdist_worker(config):
        os.environ[SESSION_MARKER] = str(os.getpid())


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop this process's session stack. Then, in the process that runs the session (the
    xdist controller, which finishes after every worker has stopped its own), fail the run if
    any other local stack started during it (by a test, or by a kernel a test ran) is still
    alive, and stop those too. Stacks outlive the processes that start them, so tests must
    stop what they start."""
    stop_local_stack()
    if _is_xdist_worker(session.config):
        return
    leftovers = server_processes(**{SESSION_MARKER: os.environ[SESSION_MARKER]})
    for process in leftovers:
        process.kill()
    if leftovers:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nlocal stack processes left running: {[p.pid for p in leftovers]}")
