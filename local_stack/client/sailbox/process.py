"""One running bubblewrap: start it, collect its output within bounds, kill all it started."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from local_stack.client.sailbox.isolation import SANDBOX_ENV

# Sail's ceiling on collected output when the caller sets no cap: a runaway stream must
# not exhaust the training process's memory.
OUTPUT_CEILING_BYTES = 64 * 1024 * 1024
_READ_CHUNK_BYTES = 1 << 20
# bubblewrap reports its namespace's init within milliseconds of starting.
_INIT_REPORT_SECONDS = 5.0
# After a kill, the streams close as soon as the kernel has torn the namespace down.
_KILL_GRACE_SECONDS = 5.0
_CHILD_PID = re.compile(rb'"child-pid":\s*(\d+)')


@dataclass(frozen=True)
class Outcome:
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


def output_cap(limit: int | None) -> int:
    return OUTPUT_CEILING_BYTES if limit is None else min(max(limit, 0), OUTPUT_CEILING_BYTES)


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


async def _settle(collected: Awaitable[object]) -> None:
    """Let a killed command's streams reach EOF, but never wait on them for long: a hung
    rollout would cost more than the output the command might still have had."""
    with contextlib.suppress(BaseException):
        await asyncio.wait_for(collected, _KILL_GRACE_SECONDS)


class Bubblewrap:
    """One running bubblewrap, and the host PID of its namespace's init, read from --info-fd."""

    def __init__(self, process: asyncio.subprocess.Process, init_pid: asyncio.Task[int | None]):
        self.process = process
        self.init_pid = init_pid

    @classmethod
    async def start(
        cls, argv_for_info_fd: Callable[[int], list[str]], *, with_stdin: bool
    ) -> Bubblewrap:
        """Start `argv_for_info_fd(fd)`, the full argv given the fd bubblewrap reports on.

        Started with `SANDBOX_ENV` as its whole environment: bubblewrap's init inside the
        sandbox keeps the environment bubblewrap was started with, readable to any command.
        """
        info_read, info_write = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                *argv_for_info_fd(info_write),
                stdin=asyncio.subprocess.PIPE if with_stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                pass_fds=(info_write,),
                env=SANDBOX_ENV,
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

    async def collect(
        self, *, timeout: float | None, limit: int | None, stdin: bytes | None
    ) -> Outcome:
        """Wait for the command, keeping each stream's head; past `timeout`, kill it.

        Cancelled by the caller, the command is killed too: it must not outlive the call,
        and the kill is shielded so a second cancellation cannot interrupt it.
        """
        process = self.process
        stdout, stderr = _StreamHead(output_cap(limit)), _StreamHead(output_cap(limit))
        assert process.stdout is not None and process.stderr is not None
        collected = asyncio.gather(
            stdout.drain(process.stdout),
            stderr.drain(process.stderr),
            _feed(process.stdin, stdin),
            process.wait(),
            self.init_pid,
        )
        timed_out = False
        try:
            await asyncio.wait_for(asyncio.shield(collected), timeout)
        except TimeoutError:
            timed_out = True
            await self.kill()
            await _settle(collected)
        except BaseException:
            await asyncio.shield(asyncio.ensure_future(self.kill()))
            await _settle(collected)
            raise
        return Outcome(
            stdout=bytes(stdout.data),
            stdout_truncated=stdout.truncated,
            stderr=bytes(stderr.data),
            stderr_truncated=stderr.truncated,
            exit_code=process.returncode if process.returncode is not None else -1,
            timed_out=timed_out,
        )
