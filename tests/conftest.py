"""Shared fixtures: one local stack per test session, in a temporary storage dir."""

from __future__ import annotations

import os
from collections.abc import Iterator

import psutil
import pytest

from helpers.kimi import offline_kimi_renderer
from local_stack.engine.model import load_base_model
from local_stack.supervisor import LocalStack, start_local_stack, stop_local_stack


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """The local Sail + Tinker server, SDK environment pointed at it; stopped at session end."""
    os.environ["COURSE_LOCAL_STACK_DIR"] = str(tmp_path_factory.mktemp("local-stack"))
    yield start_local_stack()
    stop_local_stack()


@pytest.fixture(scope="session")
def renderer():
    """The real kimi_k26 renderer on the offline Kimi K2.6 tokenizer."""
    return offline_kimi_renderer()


@pytest.fixture(scope="session")
def base():
    """The tiny base model and its vocabulary (one thread, as the local stack runs it)."""
    import torch

    torch.set_num_threads(1)
    return load_base_model()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run if any local stack server this session started is still alive."""
    stop_local_stack()
    leftovers = [
        p.pid
        for p in psutil.Process().children(recursive=True)
        if "local_stack" in " ".join(_cmdline(p)) and p.is_running()
    ]
    if leftovers:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nlocal stack processes left running: {leftovers}")


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []
