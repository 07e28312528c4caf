"""A local stand-in for `sail.tinker_sandbox_factory`: the cookbook's sandbox on bubblewrap.

This is a teaching sandbox, not a security boundary like a Sailbox VM. It shares the
host kernel and sees the host's /usr and /etc read-only; it exists so the course can run
model-written commands offline without running them inside the training process. Where
bubblewrap or user namespaces are unavailable it refuses to start rather than run
anything unisolated.

Each command runs in its own namespaces (see `isolation`), so files persist between
commands but processes do not: unlike a Sailbox, a background process ends with the
command that started it. Each sandbox as a whole is bounded in memory, processes and
bytes written (see `ResourceLimits` and `enclosure`).

Commands run as a Sailbox runs them: through sail's own `bash_lc_argv`, a login bash as
root, which reads the dotfiles and profile `image_filesystem` lays out for each sandbox.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import weakref
from collections.abc import Mapping
from pathlib import Path

from sail._shell import bash_lc_argv
from tinker_cookbook.exceptions import SandboxError
from tinker_cookbook.sandbox.sandbox_interface import SandboxResult, SandboxTerminatedError

from local_stack.client.sailbox import isolation
from local_stack.client.sailbox.enclosure import Enclosure, totals_problem
from local_stack.client.sailbox.image_filesystem import writable_directories
from local_stack.client.sailbox.isolation import ResourceLimits, SandboxIdentity
from local_stack.client.sailbox.process import Bubblewrap, Outcome, output_cap

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = ResourceLimits()
# Where commands run when the caller names no working directory: a container's default,
# "/", cannot be handed out as a writable directory.
DEFAULT_WORKDIR = "/app"
_WRITE_FILE_SCRIPT = (
    'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && if [ "$2" = 1 ]; then chmod +x -- "$1"; fi'
)
_BUDGET_SPENT = "the sandbox reached its lifetime budget and was terminated"
# What `sail.ExecResult` reports for a command its timeout ended (sail 0.17.1,
# `sail/exec_process.py`), and what `sail.TinkerSandbox` passes through unchanged.
TIMEOUT_EXIT_CODE = 124


class SandboxUnavailableError(SandboxError):
    """This machine cannot isolate commands, so the local sandbox will not start."""


class LocalSandbox:
    """One sandbox: private writable directories and the rules for running commands in them.

    A teaching sandbox, not a security boundary like a Sailbox VM (see the module docstring).

    Inside, the working directory (the task's, named by the caller), /tests, /logs, root's
    HOME /root, /etc/profile and /etc/profile.d are writable and backed by `host_dir`;
    everything else is read-only or absent. Operations
    follow `sail.TinkerSandbox`: once the lifetime budget has run out the sandbox is cleaned
    up and the operation raises the cookbook's `SandboxTerminatedError`, as does any
    operation after `cleanup`. Unlike Sail's, the budget also ends a command still running
    when it runs out, whatever that command's own timeout (`None` included).

    `sandbox_id`, `workdir` (where a command that names none runs) and `limits` are fixed
    when the sandbox is created.
    """

    def __init__(
        self,
        enclosure: Enclosure,
        writable: Mapping[str, Path],
        workdir: str,
        limits: ResourceLimits,
        identity: SandboxIdentity,
        timeout_seconds: float | None,
    ) -> None:
        self.sandbox_id = enclosure.host_dir.name
        self.workdir = workdir
        self.limits = limits
        self._enclosure = enclosure
        self._writable = dict(writable)
        self._identity = identity
        self._deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        self._running: set[Bubblewrap] = set()
        self._closed = False
        # A sandbox nobody cleaned up is still released when collected or at exit.
        self._release = weakref.finalize(self, enclosure.release)

    @property
    def host_dir(self) -> Path:
        """Where the sandbox's writable directories live on the host (gone after `cleanup`)."""
        return self._enclosure.host_dir

    @property
    def totals_enforced(self) -> bool:
        """Whether the per-sandbox totals of `limits` hold here (they need root)."""
        return self._enclosure.totals_enforced

    def memory_peak_bytes(self) -> int | None:
        """The most memory this sandbox has held at once (None where totals are not enforced)."""
        return self._enclosure.memory_peak_bytes()

    async def run_command(
        self,
        command: str,
        workdir: str | None = None,
        timeout: float | None = 60,
        max_output_bytes: int | None = None,
    ) -> SandboxResult:
        """Run `command` as `sail.TinkerSandbox` does on a Sailbox: `/bin/bash -lc`, a login
        shell (sail's `bash_lc_argv`, which runs it in `workdir` through `exec /bin/bash -c`);
        past `timeout` seconds it is killed with all it started.

        Each output stream keeps its first `max_output_bytes` (default: the 64 MiB ceiling).
        The result carries `sail.ExecResult`'s fields as `sail.TinkerSandbox` passes them
        on: a command its timeout ended has exit code 124 and `metrics["timed_out"]`, and
        its stderr is only what the command wrote (nothing is appended). A timeout of zero
        or less runs nothing and reports exit code -1, as `TinkerSandbox` does.
        """
        await self._check_alive()
        if timeout is not None and timeout <= 0:
            return SandboxResult(
                stdout="",
                stderr=f"command timed out after {timeout} seconds",
                exit_code=-1,
                metrics={"timed_out": True},
            )
        return await self.run_argv(
            bash_lc_argv(command, cwd=workdir or self.workdir),
            timeout=timeout,
            max_output_bytes=max_output_bytes,
        )

    async def run_argv(
        self, argv: list[str], timeout: float | None = 60, max_output_bytes: int | None = None
    ) -> SandboxResult:
        """Run `argv` itself, no shell around it (`Sailbox.exec` with an argv does the same),
        in the sandbox's working directory; the result is `run_command`'s."""
        await self._check_alive()
        outcome = await self._execute(
            argv, cwd=self.workdir, timeout=timeout, limit=max_output_bytes
        )
        return SandboxResult(
            stdout=outcome.stdout_text,
            stderr=outcome.stderr_text,
            exit_code=TIMEOUT_EXIT_CODE if outcome.timed_out else outcome.exit_code,
            metrics={
                "timed_out": outcome.timed_out,
                "stdout_truncated": outcome.stdout_truncated,
                "stderr_truncated": outcome.stderr_truncated,
            },
        )

    async def read_file(
        self, path: str, max_bytes: int | None = None, timeout: float = 60
    ) -> SandboxResult:
        """Read a file as the sandbox sees it, up to `max_bytes` (exit code 1 on failure).

        Reading inside the sandbox, not through `host_dir`, means a symlink the command
        planted cannot make the training process read a host file.
        """
        await self._check_alive()
        limit = output_cap(max_bytes)
        outcome = await self._execute(
            ["head", "-c", str(limit + 1), "--", path], cwd="/", timeout=timeout, limit=limit
        )
        if outcome.timed_out or outcome.exit_code != 0:
            return _failure("read_file", timeout, outcome)
        return SandboxResult(
            stdout=outcome.stdout_text,
            stderr="",
            exit_code=0,
            metrics={"truncated": outcome.stdout_truncated},
        )

    async def write_file(
        self, path: str, content: str | bytes, executable: bool = False, timeout: float = 60
    ) -> SandboxResult:
        """Write a file from inside the sandbox, creating its directory (exit code 1 on failure)."""
        await self._check_alive()
        data = content.encode() if isinstance(content, str) else content
        outcome = await self._execute(
            ["bash", "-c", _WRITE_FILE_SCRIPT, "write_file", path, "1" if executable else "0"],
            cwd="/",
            timeout=timeout,
            limit=None,
            stdin=data,
        )
        if outcome.timed_out or outcome.exit_code != 0:
            return _failure("write_file", timeout, outcome)
        return SandboxResult(stdout="", stderr="", exit_code=0, metrics={})

    async def send_heartbeat(self, timeout: float = 30) -> None:
        """Only enforces the lifetime budget: a local sandbox needs no keep-alive."""
        del timeout
        await self._check_alive()

    async def cleanup(self) -> None:
        """Kill every running command and delete the sandbox's files; safe to call twice."""
        self._closed = True
        running = list(self._running)
        await asyncio.gather(*(bwrap.kill() for bwrap in running))
        await asyncio.gather(*(bwrap.process.wait() for bwrap in running))
        await asyncio.to_thread(self._release)

    def _budget_left(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    async def _check_alive(self) -> None:
        if self._closed:
            raise SandboxTerminatedError(f"sandbox {self.sandbox_id} was cleaned up")
        left = self._budget_left()
        if left is not None and left <= 0:
            await self.cleanup()
            raise SandboxTerminatedError(_BUDGET_SPENT)

    async def _execute(
        self,
        command: list[str],
        *,
        cwd: str,
        timeout: float | None,
        limit: int | None,
        stdin: bytes | None = None,
    ) -> Outcome:
        """Run one isolated command, for at most `timeout` and what is left of the budget."""
        left = self._budget_left()
        budget_first = left is not None and (timeout is None or left < timeout)
        bwrap = await Bubblewrap.start(
            functools.partial(self._argv, command, cwd), with_stdin=stdin is not None
        )
        self._running.add(bwrap)
        try:
            if self._closed:  # cleanup began while this command was starting
                await bwrap.kill()
            outcome = await bwrap.collect(
                timeout=left if budget_first else timeout, limit=limit, stdin=stdin
            )
        finally:
            self._running.discard(bwrap)
        if outcome.timed_out and budget_first:
            await self.cleanup()
            raise SandboxTerminatedError(_BUDGET_SPENT)
        return outcome

    def _argv(self, command: list[str], cwd: str, info_fd: int) -> list[str]:
        """Join the sandbox's cgroup, become its uid, then isolate the command."""
        return (
            self._enclosure.launch_argv()
            + self._identity.launch_argv(self.limits)
            + isolation.sandbox_argv(
                command, writable=self._writable, cwd=cwd, limits=self.limits, info_fd=info_fd
            )
        )


def _failure(operation: str, timeout: float, outcome: Outcome) -> SandboxResult:
    """A file operation that failed: exit code 1, as the cookbook's contract and Sail report it."""
    reason = (
        f"{operation} timed out after {timeout} seconds"
        if outcome.timed_out
        else outcome.stderr_text
    )
    return SandboxResult(
        stdout="", stderr=reason, exit_code=1, metrics={"timed_out": outcome.timed_out}
    )


@functools.cache
def _warn_totals_not_enforced(problem: str) -> None:
    logger.warning(
        "The local sandbox bounds each process, but not each sandbox as a whole: %s.", problem
    )


async def local_sandbox_factory(
    env_dir: str | Path,
    timeout_seconds: float | None = None,
    *,
    workdir: str = DEFAULT_WORKDIR,
    limits: ResourceLimits = DEFAULT_LIMITS,
    startup_latency_seconds: float = 0.0,
) -> LocalSandbox:
    """Create a `LocalSandbox` for the task whose `environment/` directory is `env_dir`.

    Same call shape as `sail.tinker_sandbox_factory`, and module-level so that a
    `functools.partial` presetting `limits` pickles into rollout workers. No image is
    pulled or built (commands use the host's programs), so nothing in `env_dir` is read:
    the caller, who knows the task's layout, names its working directory as `workdir`.
    `startup_latency_seconds` stands in for a cloud sandbox's boot time (a Sailbox takes
    seconds to start), so a notebook can show what creating a group's sandboxes one after
    another costs.
    """
    problem = isolation.isolation_problem()
    if problem is not None:
        raise SandboxUnavailableError(
            f"Refusing to start the local sandbox, which never runs commands unisolated: {problem}."
        )
    isolation.check_workdir(workdir)
    if (unenforced := totals_problem()) is not None:
        _warn_totals_not_enforced(unenforced)
    identity = SandboxIdentity.pick()
    enclosure = await asyncio.to_thread(Enclosure.create, limits, identity)
    writable = writable_directories(enclosure.host_dir, workdir, identity)
    # Like Sail's, the lifetime budget starts once the sandbox exists.
    sandbox = LocalSandbox(enclosure, writable, workdir, limits, identity, timeout_seconds)
    await asyncio.sleep(startup_latency_seconds)
    return sandbox
