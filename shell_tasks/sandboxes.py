"""Where notebook 08's sandboxes come from: Sailboxes without network, or the local sandbox.

The guide's factory, `functools.partial(sail.tinker_sandbox_factory, size="s")`, creates
each Sailbox without an egress policy, and a Sailbox created without one can reach every
host (`sail.EgressPolicy.allow_all`). A model-written command could then download
anything, reach your services, or send out whatever it found. `sailbox_factory` is the
same factory with the Sailbox created under `sail.EgressPolicy.no_network()`, or
`allow_only(...)` the hosts a task names.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sail
from sail.errors import SailboxHostLostError, SailboxTerminatedError, SailError

# The guide factory's own steps, reused so that image choice, naming and the cancel-safe
# create stay exactly as `sail.tinker_sandbox_factory` does them (sail 0.17.1).
from sail.sailbox import (
    _bounded_launch,
    _DeadlineExpired,
    _launch_and_collect,
    _reclaimed_create,
    _retry_replayable_file_transfer,
)
from sail.tinker import _sandbox_name, _tinker_image
from tinker_cookbook.sandbox.sandbox_interface import (
    SandboxInterface,
    SandboxResult,
    SandboxTerminatedError,
)

from helpers.params import check_backend
from shell_tasks.harbor_task import dockerfile_workdir

SandboxFactory = Callable[[Path, int], Awaitable[SandboxInterface]]
# `Sailbox.fs.write`'s own default mode, for a file that is not executable.
PLAIN_FILE_MODE = 0o644


class CourseTinkerSandbox(sail.TinkerSandbox):
    """`sail.TinkerSandbox`, with a `write_file` that can write a file that is not executable,
    and `run_argv`, which runs a command without the login shell `run_command` wraps it in.

    sail 0.17.1's `write_file` passes `mode=None` for such a file, and `Sailbox.fs.write`
    refuses that with a TypeError before sending anything, so every plain upload (a task's
    input files, a hand-written file) would fail. This is the SDK's method with `fs.write`'s
    default mode in place of None.
    """

    async def run_argv(
        self, argv: list[str], timeout: float | None = 60, max_output_bytes: int | None = None
    ) -> SandboxResult:
        """`run_command`'s body (sail 0.17.1) with `argv` exec'd as it is, where the SDK's
        method passes `bash_lc_argv(command)`: the grader's tests run in a shell of its own
        choosing (`shell_tasks.harbor_task.CLEAN_TESTS_ARGV`), not a login shell."""
        await self._check_deadline()
        launch = self._sailbox.exec.aio(argv, timeout=timeout)
        try:
            stdout, stdout_cut, stderr, stderr_cut, result = await _launch_and_collect(
                launch, max_output_bytes
            )
        except (SailboxTerminatedError, SailboxHostLostError) as error:
            raise SandboxTerminatedError(str(error)) from error
        except SailError as error:
            return SandboxResult(stdout="", stderr=str(error), exit_code=-1, metrics={})
        return SandboxResult(
            stdout=stdout.decode("utf-8", errors="replace"),
            stderr=stderr.decode("utf-8", errors="replace"),
            exit_code=result.exit_code,
            metrics={
                "timed_out": result.timed_out,
                "stdout_truncated": stdout_cut,
                "stderr_truncated": stderr_cut,
            },
        )

    async def write_file(
        self,
        path: str,
        content: str | bytes,
        executable: bool = False,
        timeout: float = 60,
    ) -> SandboxResult:
        await self._check_deadline()
        mode = 0o755 if executable else PLAIN_FILE_MODE
        try:
            await _bounded_launch(
                _retry_replayable_file_transfer(
                    lambda: self._sailbox.fs.write.aio(path, content, mode=mode)
                ),
                timeout,
            )
        except _DeadlineExpired:
            return SandboxResult(
                stdout="",
                stderr=f"write_file timed out after {timeout} seconds",
                exit_code=1,
                metrics={"timed_out": True},
            )
        except (SailboxTerminatedError, SailboxHostLostError) as error:
            raise SandboxTerminatedError(str(error)) from error
        except SailError as error:
            return SandboxResult(stdout="", stderr=str(error), exit_code=1, metrics={})
        return SandboxResult(stdout="", stderr="", exit_code=0, metrics={})


async def sailbox_factory(
    env_dir: str | Path,
    timeout_seconds: float | None = None,
    *,
    allowed_hosts: tuple[str, ...] = (),
    app: str | None = None,
    size: sail.SailboxSize = "s",
    image_ref: str | None = None,
    name_prefix: str = "tinker",
) -> CourseTinkerSandbox:
    """`sail.tinker_sandbox_factory` with the network closed, for model-written commands
    (and plain files writable: see `CourseTinkerSandbox`).

    With no `allowed_hosts` the Sailbox has no network at all (no connections, no name
    lookups); with some, it reaches only those. `timeout_seconds` is also the Sailbox's
    `max_lifetime_seconds`, so Sail ends it, and any command still running, when the
    budget is spent, even if this process is gone. Module-level, so a `functools.partial`
    of it pickles into rollout workers.
    """
    env_dir = Path(env_dir)
    policy = (
        sail.EgressPolicy.allow_only(*allowed_hosts)
        if allowed_hosts
        else sail.EgressPolicy.no_network()
    )
    image = await _tinker_image(env_dir, image_ref)
    app_obj = await sail.App.find.aio(
        app or os.environ.get("SAIL_APP") or "tinker", mint_if_missing=True
    )
    create = sail.Sailbox.create.aio(
        app=app_obj,
        image=image,
        name=_sandbox_name(name_prefix, env_dir.name),
        size=size,
        egress_policy=policy,
        max_lifetime_seconds=None if timeout_seconds is None else math.ceil(timeout_seconds),
    )
    sailbox = await _reclaimed_create(asyncio.ensure_future(create))
    return CourseTinkerSandbox(sailbox, timeout_seconds=timeout_seconds)


async def local_task_sandbox(
    env_dir: str | Path, timeout_seconds: float | None = None, **settings: Any
) -> SandboxInterface:
    """The local stack's sandbox for the task whose environment is `env_dir`, working in its
    Dockerfile's WORKDIR (the stack reads no task files). Module-level, so a
    `functools.partial` of it pickles into rollout workers."""
    from local_stack.client.sailbox import local_sandbox_factory  # the cloud path never loads it

    workdir = dockerfile_workdir(Path(env_dir))
    return await local_sandbox_factory(env_dir, timeout_seconds, workdir=workdir, **settings)


def sandbox_factory(backend: str, *, simulated_boot_seconds: float = 0.0) -> SandboxFactory:
    """The sandbox factory for `backend`, with the call shape the cookbook expects.

    "cloud": `sailbox_factory` (size "s", no network). "local": `local_task_sandbox`, the
    local stack's bubblewrap sandbox, each creation first waiting `simulated_boot_seconds`
    to stand in for a Sailbox's boot.
    """
    check_backend(backend)
    if backend == "cloud":
        return functools.partial(sailbox_factory, size="s")
    return functools.partial(local_task_sandbox, startup_latency_seconds=simulated_boot_seconds)


def sandbox_problem(backend: str) -> str | None:
    """Why this machine cannot create `backend`'s sandboxes, or None when it can.

    "cloud": None, since Sailboxes run on Sail (`helpers.connect` checks the keys).
    "local": the local sandbox's own check, which runs one real sandboxed `true`.
    """
    check_backend(backend)
    if backend == "cloud":
        return None
    from local_stack.client.sailbox.isolation import isolation_problem

    return isolation_problem()
