"""A local stand-in for `sail.tinker_sandbox_factory`: the cookbook's sandbox on bubblewrap.

This is a teaching sandbox, not a security boundary like a Sailbox VM. It shares the
host kernel, sees the host's /usr and /etc read-only, and has no disk quota; it exists so
the course can run model-written commands offline without running them inside the
training process. Where bubblewrap or user namespaces are unavailable it refuses to
start rather than run anything unisolated.

Each command runs in its own namespaces (see `isolation`), so files persist between
commands but processes do not: unlike a Sailbox, a background process ends with the
command that started it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tinker_cookbook.exceptions import SandboxError
from tinker_cookbook.sandbox.sandbox_interface import SandboxResult, SandboxTerminatedError

from helpers.harbor_task import dockerfile_workdir
from local_stack.sandbox import isolation
from local_stack.sandbox.isolation import ResourceLimits, SandboxIdentity

DEFAULT_LIMITS = ResourceLimits()

# Sail's ceiling on collected output when the caller sets no cap: a runaway stream must
# not exhaust the training process's memory.
OUTPUT_CEILING_BYTES = 64 * 1024 * 1024
_READ_CHUNK_BYTES = 1 << 20
# bubblewrap reports its namespace's init within milliseconds of starting.
_INIT_REPORT_SECONDS = 5.0
# After a kill, the streams close as soon as the kernel has torn the namespace down.
_KILL_GRACE_SECONDS = 5.0
_CHILD_PID = re.compile(rb'"child-pid":\s*(\d+)')
# Harbor's verifier contract: tests are uploaded to /tests and the reward is read from /logs.
_HARBOR_DIRS = ("/tests", "/logs")
_WRITE_FILE_SCRIPT = (
    'mkdir -p -- "$(dirname -- "$1")" && cat > "$1" && if [ "$2" = 1 ]; then chmod +x -- "$1"; fi'
)


class SandboxUnavailableError(SandboxError):
    """This machine cannot isolate commands, so the local sandbox will not start."""


@dataclass(frozen=True)
class _Outcome:
    stdout: bytes
    stdout_truncated: bool
    stderr: bytes
    stderr_truncated: bool
    exit_code: int
    timed_out: bool

    @property
    def stdout_text(self) -> str:
        return self.stdout.decode("utf-8", errors="replace")

    @property
    def stderr_text(self) -> str:
        return self.stderr.decode("utf-8", errors="replace")


class _StreamHead:
    """A stream's first `limit` bytes; the rest is read and dropped so the writer never blocks."""

    def __init__(self, limit: int) -> None:
        self.data = bytearray()
        self.truncated = False
        self._limit = limit

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(_READ_CHUNK_BYTES):
            keep = max(self._limit - len(self.data), 0)
            self.data += chunk[:keep]
            self.truncated |= len(chunk) > keep


async def _feed(stdin: asyncio.StreamWriter | None, data: bytes | None) -> None:
    if stdin is None or data is None:
        return
    # A command that exits without reading its input (a failed mkdir, say) is not our error.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(data)
        await stdin.drain()
        stdin.close()


class _Bubblewrap:
    """One running bubblewrap, and the host PID of its namespace's init, read from --info-fd."""

    def __init__(self, process: asyncio.subprocess.Process, init_pid: asyncio.Task[int | None]):
        self.process = process
        self.init_pid = init_pid

    @classmethod
    async def start(
        cls,
        command: list[str],
        *,
        writable: Mapping[str, Path],
        cwd: str,
        limits: ResourceLimits,
        identity: SandboxIdentity,
        with_stdin: bool,
    ) -> _Bubblewrap:
        info_read, info_write = os.pipe()
        try:
            argv = isolation.sandbox_argv(
                command, writable=writable, cwd=cwd, limits=limits, info_fd=info_write
            )
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if with_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=(info_write,),
                **identity.popen_kwargs(),
            )
        except BaseException:
            os.close(info_read)
            raise
        finally:
            os.close(info_write)
        return cls(process, asyncio.ensure_future(_read_init_pid(info_read)))

    async def kill(self) -> None:
        """SIGKILL the namespace's init, which takes every process inside with it, then bubblewrap.

        Killing bubblewrap alone is not enough: its --die-with-parent is armed by the init
        a moment after the command starts, and a kill inside that window would orphan the
        namespace. bubblewrap reports the init's PID right after creating it, so waiting
        for the report is brief.
        """
        with contextlib.suppress(TimeoutError):
            init_pid = await asyncio.wait_for(asyncio.shield(self.init_pid), _INIT_REPORT_SECONDS)
            if init_pid is not None and self.process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(init_pid, signal.SIGKILL)
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)


async def _read_init_pid(fd: int) -> int | None:
    """The `child-pid` from bubblewrap's --info-fd JSON; None if it exited before creating one.

    Matched rather than parsed: a bubblewrap killed mid-report leaves the JSON unfinished.
    """
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        info = await reader.read()
    finally:
        transport.close()
    reported = _CHILD_PID.search(info)
    return int(reported.group(1)) if reported else None


def _remove_tree(path: Path) -> None:
    """Delete a sandbox's files even where a command removed its own write permission."""
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            directory = os.path.join(root, name)
            if not os.path.islink(directory):  # never chmod what a planted symlink points to
                with contextlib.suppress(OSError):
                    os.chmod(directory, 0o700)
    shutil.rmtree(path, ignore_errors=True)


class LocalSandbox:
    """One sandbox: private writable directories and the rules for running commands in them.

    A teaching sandbox, not a security boundary like a Sailbox VM (see the module docstring).

    Inside, the working directory (the task Dockerfile's WORKDIR), /tests and /logs are
    writable and backed by `host_dir`; everything else is read-only or absent. Operations
    follow `sail.TinkerSandbox`: the lifetime budget is checked when each operation starts,
    and once it has run out the sandbox is cleaned up and the operation raises the
    cookbook's `SandboxTerminatedError`, as does any operation after `cleanup`.
    """

    def __init__(
        self,
        *,
        host_dir: Path,
        writable: Mapping[str, Path],
        workdir: str,
        limits: ResourceLimits,
        identity: SandboxIdentity,
        timeout_seconds: float | None,
    ) -> None:
        self._id = host_dir.name
        self._host_dir = host_dir
        self._writable = dict(writable)
        self._workdir = workdir
        self._limits = limits
        self._identity = identity
        self._deadline = None if timeout_seconds is None else time.monotonic() + timeout_seconds
        self._running: set[_Bubblewrap] = set()
        self._closed = False
        # A sandbox nobody cleaned up still loses its files when collected or at exit.
        self._remove_files = weakref.finalize(self, _remove_tree, host_dir)

    @property
    def sandbox_id(self) -> str:
        return self._id

    @property
    def host_dir(self) -> Path:
        """Where the sandbox's writable directories live on the host (gone after `cleanup`)."""
        return self._host_dir

    @property
    def workdir(self) -> str:
        """The working directory inside the sandbox, used when a command names none."""
        return self._workdir

    async def run_command(
        self,
        command: str,
        workdir: str | None = None,
        timeout: float | None = 60,
        max_output_bytes: int | None = None,
    ) -> SandboxResult:
        """Run `command` with bash; past `timeout` seconds it is killed with all it started.

        Each output stream keeps its first `max_output_bytes` (default: the 64 MiB ceiling);
        a timed-out command reports exit code -1 and `metrics["timed_out"]`, as Sail does.
        """
        await self._check_alive()
        if timeout is not None and timeout <= 0:
            return SandboxResult(
                stdout="",
                stderr=f"command timed out after {timeout} seconds",
                exit_code=-1,
                metrics={"timed_out": True},
            )
        outcome = await self._execute(
            ["bash", "-c", command],
            cwd=workdir or self._workdir,
            timeout=timeout,
            limit=max_output_bytes,
        )
        stderr = outcome.stderr_text
        if outcome.timed_out:
            separator = "" if not stderr or stderr.endswith("\n") else "\n"
            stderr = f"{stderr}{separator}command timed out after {timeout} seconds"
        return SandboxResult(
            stdout=outcome.stdout_text,
            stderr=stderr,
            exit_code=-1 if outcome.timed_out else outcome.exit_code,
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
        limit = _output_cap(max_bytes)
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
        await asyncio.to_thread(self._remove_files)

    async def _check_alive(self) -> None:
        if self._closed:
            raise SandboxTerminatedError(f"sandbox {self._id} was cleaned up")
        if self._deadline is not None and time.monotonic() > self._deadline:
            await self.cleanup()
            raise SandboxTerminatedError(
                "the sandbox reached its lifetime budget and was terminated"
            )

    async def _execute(
        self,
        command: list[str],
        *,
        cwd: str,
        timeout: float | None,
        limit: int | None,
        stdin: bytes | None = None,
    ) -> _Outcome:
        bwrap = await _Bubblewrap.start(
            command,
            writable=self._writable,
            cwd=cwd,
            limits=self._limits,
            identity=self._identity,
            with_stdin=stdin is not None,
        )
        self._running.add(bwrap)
        if self._closed:  # cleanup began while this command was starting
            await bwrap.kill()
        process = bwrap.process
        stdout, stderr = _StreamHead(_output_cap(limit)), _StreamHead(_output_cap(limit))
        assert process.stdout is not None and process.stderr is not None
        collected = asyncio.gather(
            stdout.drain(process.stdout),
            stderr.drain(process.stderr),
            _feed(process.stdin, stdin),
            process.wait(),
            bwrap.init_pid,
        )
        timed_out = False
        try:
            try:
                await asyncio.wait_for(asyncio.shield(collected), timeout)
            except TimeoutError:
                timed_out = True
                await bwrap.kill()
                await _settle(collected)
        except BaseException:
            # Cancelled by the caller: the command must not outlive the call, and the kill
            # is shielded so a second cancellation cannot interrupt it.
            await asyncio.shield(asyncio.ensure_future(bwrap.kill()))
            await _settle(collected)
            raise
        finally:
            self._running.discard(bwrap)
        return _Outcome(
            stdout=bytes(stdout.data),
            stdout_truncated=stdout.truncated,
            stderr=bytes(stderr.data),
            stderr_truncated=stderr.truncated,
            exit_code=process.returncode if process.returncode is not None else -1,
            timed_out=timed_out,
        )


async def _settle(collected: asyncio.Future[object]) -> None:
    """Let a killed command's streams reach EOF, but never wait on them for long: a hung
    rollout would cost more than the output the command might still have had."""
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(collected, _KILL_GRACE_SECONDS)


def _failure(operation: str, timeout: float, outcome: _Outcome) -> SandboxResult:
    """A file operation that failed: exit code 1, as the cookbook's contract and Sail report it."""
    reason = (
        f"{operation} timed out after {timeout} seconds"
        if outcome.timed_out
        else outcome.stderr_text
    )
    return SandboxResult(
        stdout="", stderr=reason, exit_code=1, metrics={"timed_out": outcome.timed_out}
    )


def _output_cap(limit: int | None) -> int:
    return OUTPUT_CEILING_BYTES if limit is None else min(max(limit, 0), OUTPUT_CEILING_BYTES)


async def local_sandbox_factory(
    env_dir: str | Path,
    timeout_seconds: float | None = None,
    *,
    limits: ResourceLimits = DEFAULT_LIMITS,
    startup_latency_seconds: float = 0.0,
) -> LocalSandbox:
    """Create a `LocalSandbox` for the task whose `environment/` directory is `env_dir`.

    Same call shape as `sail.tinker_sandbox_factory`, and module-level so that a
    `functools.partial` presetting `limits` pickles into rollout workers. The image in
    task.toml is not pulled: commands use the host's programs. `startup_latency_seconds`
    stands in for a cloud sandbox's boot time (a Sailbox takes seconds to start), so a
    notebook can show what creating a group's sandboxes one after another costs.
    """
    problem = isolation.isolation_problem()
    if problem is not None:
        raise SandboxUnavailableError(
            f"Refusing to start the local sandbox, which never runs commands unisolated: {problem}."
        )
    workdir = dockerfile_workdir(Path(env_dir))
    isolation.check_workdir(workdir)
    identity = SandboxIdentity.pick()
    host_dir = Path(tempfile.mkdtemp(prefix="local-sandbox-"))
    writable = {
        inside: host_dir / inside.strip("/").replace("/", "_")
        for inside in (workdir, *_HARBOR_DIRS)
    }
    for directory in (host_dir, *writable.values()):
        directory.mkdir(exist_ok=True)
        identity.give(directory)
    await asyncio.sleep(startup_latency_seconds)
    # Like Sail's, the lifetime budget starts once the sandbox exists.
    return LocalSandbox(
        host_dir=host_dir,
        writable=writable,
        workdir=workdir,
        limits=limits,
        identity=identity,
        timeout_seconds=timeout_seconds,
    )
