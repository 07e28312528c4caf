"""Sailboxes without Sail: the Sailbox calls of sail's transport, answered by local sandboxes.

Everything sail's Python layer does with a Sailbox (`sail.Sailbox`, `sail.TinkerSandbox`,
`sail.tinker_sandbox_factory`, exec handles, file streams) goes through one object, the Rust
core client that `sail._core_client.CoreClient.get()` returns. `install_local_sailboxes()`
wraps that object: the calls a sandboxed rollout makes (find the app, build the image,
create, exec, write and read a file, terminate) are answered here by `LocalSandbox`es, and
every other call (Sail's inference API) goes to the real core unchanged. So the code above
the transport, retries, deadlines and kills included, is the installed SDK's own.

Exec results are what `sail.exec_process.ExecResult` documents: a command past its exec
timeout is killed and reports exit code 124 with `timed_out`, and nothing is added to its
stderr. Where a Sailbox and this stand-in differ (the stand-in's commands run on this
machine's programs under bubblewrap, not in a VM from the image):
- no image is pulled or built, and the working directory is `/app` whatever the image says;
- only `/app`, `/tests`, `/logs`, root's HOME `/root`, `/etc/profile` and `/etc/profile.d`
  are writable, for commands and file writes alike (a command runs in the login shell the
  SDK asks for, `bash -lc`, which reads the last three), and
  the local sandbox's limits hold (`ResourceLimits`), not those of the Sailbox's size;
- no process outlives its command, and there is no network whatever the egress policy;
- each output stream arrives whole when its command ends, not live (so no stream has gaps
  unless it passed the 64 MiB the local sandbox keeps).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sail.errors
from sail import _core
from sail._core_client import CoreClient
from tinker_cookbook.sandbox.sandbox_interface import SandboxTerminatedError

from local_stack.client.sailbox.local_sandbox import (
    DEFAULT_WORKDIR,
    LocalSandbox,
    local_sandbox_factory,
)
from local_stack.client.sailbox.process import OUTPUT_CEILING_BYTES, Outcome

# `sail.exec_process.ExecResult`: "Whether the exec's timeout passed ...; exit_code is then 124."
TIMED_OUT_EXIT_CODE = 124
_CHUNK_BYTES = 1 << 20
_WRITE_SCRIPT = (
    'if [ "$3" = 1 ]; then mkdir -p -- "$(dirname -- "$1")"; fi; cat > "$1" && chmod "$2" "$1"'
)


@dataclass
class LocalSailbox:
    """One stand-in Sailbox: its create request, as sail sent it, and the sandbox behind it."""

    sailbox_id: str
    request: dict[str, Any]
    sandbox: LocalSandbox
    terminated: bool = False
    execs: list[LocalExec] = field(default_factory=list)


class LocalSailboxCore:
    """The real core client, with its Sailbox calls answered by local sandboxes.

    `sailboxes` holds every Sailbox created through it, terminated ones included, so a
    test can read what was asked for (size, egress policy, lifetime) and what ran.
    """

    def __init__(self, real: Any) -> None:
        self._real = real
        self.sailboxes: dict[str, LocalSailbox] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def find_app_aio(self, name: str, mint_if_missing: bool) -> str:
        return json.dumps({"id": f"app-{name}", "name": name, "created_at": "2026-01-01T00:00:00Z"})

    async def build_spec_to_ready_aio(self, spec: str, **_: Any) -> tuple[str, str, None, None]:
        """Nothing to build: the local sandbox runs this machine's programs."""
        return "image-local", "", None, None

    async def create_sailbox_aio(
        self,
        app_id: str,
        name: str,
        ingress_ports: Sequence[Any],
        volume_mounts: Sequence[Any],
        image: bytes,
        size: str | None,
        memory_limit_gib: int | None,
        disk_limit_gib: int | None,
        **options: Any,
    ) -> str:
        lifetime = options.get("max_lifetime_seconds")
        sandbox = await local_sandbox_factory(Path(name), lifetime, workdir=DEFAULT_WORKDIR)
        sailbox_id = f"sb-local-{secrets.token_hex(6)}"
        request = {"app_id": app_id, "name": name, "size": size, "image": json.loads(image)}
        self.sailboxes[sailbox_id] = LocalSailbox(sailbox_id, {**request, **options}, sandbox)
        return json.dumps({"sailbox_id": sailbox_id, "name": name, "status": "running"})

    async def terminate_sailbox_aio(self, sailbox_id: str) -> None:
        """Idempotent, as Sail's is for a Sailbox already gone."""
        box = self._box(sailbox_id, alive=False)
        box.terminated = True
        await box.sandbox.cleanup()

    async def start_exec_aio(
        self,
        sailbox_id: str,
        argv: list[str],
        *,
        timeout: float | None,
        open_stdin: bool,
        pty: bool,
        env: list[tuple[str, str]],
        user: str,
        cwd: str,
        **_: Any,
    ) -> LocalExec:
        box = self._box(sailbox_id)
        if open_stdin or pty or user:
            raise sail.errors.InvalidArgumentError(
                "the local Sailbox stand-in runs commands without stdin, pty or user"
            )
        command = ["env", *(f"{k}={v}" for k, v in env), *argv] if env else list(argv)
        run = box.sandbox._execute(
            command, cwd=cwd or box.sandbox.workdir, timeout=timeout, limit=None
        )
        proc = LocalExec(asyncio.ensure_future(run))
        box.execs.append(proc)
        return proc

    def write_file(
        self, sailbox_id: str, path: str, *, create_parents: bool, mode: int, user: str | None
    ) -> LocalFileWriter:
        return LocalFileWriter(self._box(sailbox_id), path, create_parents, mode)

    def read_file(self, sailbox_id: str, path: str) -> LocalFileReader:
        return LocalFileReader(self._box(sailbox_id), path)

    def _box(self, sailbox_id: str, *, alive: bool = True) -> LocalSailbox:
        box = self.sailboxes.get(sailbox_id)
        if box is None:
            raise sail.errors.NotFoundError(f"sailbox {sailbox_id} not found")
        if alive and box.terminated:
            raise sail.errors.SailboxTerminatedError(f"sailbox {sailbox_id} was terminated")
        return box


async def _outcome(run: asyncio.Future[Outcome]) -> Outcome:
    """A command's outcome; the sandbox's end (its budget spent, or cleaned up) is Sail's."""
    try:
        return await asyncio.shield(run)
    except SandboxTerminatedError as error:
        raise sail.errors.SailboxTerminatedError(str(error)) from error


class LocalExec:
    """The core's exec handle: streams, `wait_aio`'s six fields, poll, gaps, cancel."""

    def __init__(self, run: asyncio.Future[Outcome]) -> None:
        self._run = run
        self.exec_request_id = secrets.token_hex(8)

    def stdout_reader_aio(self) -> _Stream:
        return _Stream(self._run, "stdout")

    def stderr_reader_aio(self) -> _Stream:
        return _Stream(self._run, "stderr")

    async def wait_aio(self) -> tuple[str, str, int, bool, bool, bool]:
        """stdout, stderr, exit code, timed out, and each stream's truncation, as the core
        returns them; a timed-out command reports 124 and nothing extra on stderr."""
        outcome = await _outcome(self._run)
        return (
            outcome.stdout_text,
            outcome.stderr_text,
            TIMED_OUT_EXIT_CODE if outcome.timed_out else outcome.exit_code,
            outcome.timed_out,
            outcome.stdout_truncated,
            outcome.stderr_truncated,
        )

    def poll(self) -> int | None:
        if not self._run.done() or self._run.exception() is not None:
            return None
        outcome = self._run.result()
        return TIMED_OUT_EXIT_CODE if outcome.timed_out else outcome.exit_code

    def output_gaps(self) -> tuple[bool, bool]:
        """A stream has a gap only where it passed what the local sandbox keeps."""
        outcome = self._run.result()
        return outcome.stdout_truncated, outcome.stderr_truncated

    async def cancel_aio(self, *, force: bool = False) -> None:
        """Kill the command: cancelling the sandbox's run kills all it started."""
        if not self._run.done():
            self._run.cancel()
            await asyncio.gather(self._run, return_exceptions=True)

    def close(self) -> None:
        """Release the handle; the command runs on, as on a Sailbox."""


class _Stream:
    """One output stream of an exec, in chunks, once the command has ended."""

    def __init__(self, run: asyncio.Future[Outcome], name: str) -> None:
        self._chunks = self._read(run, name)

    @staticmethod
    async def _read(run: asyncio.Future[Outcome], name: str) -> AsyncGenerator[bytes]:
        data: bytes = getattr(await _outcome(run), name)
        for start in range(0, len(data), _CHUNK_BYTES):
            yield data[start : start + _CHUNK_BYTES]

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        return await self._chunks.__anext__()

    async def aclose(self) -> None:
        await self._chunks.aclose()


class LocalFileWriter:
    """The core's file writer: chunks are kept, and `finish_aio` writes them as root would,
    with `mode`, inside the sandbox (so a path outside its writable folders fails)."""

    def __init__(self, box: LocalSailbox, path: str, create_parents: bool, mode: int) -> None:
        self._box, self._path, self._create_parents, self._mode = box, path, create_parents, mode
        self._data = bytearray()

    async def write_aio(self, chunk: bytes) -> None:
        self._data += chunk

    async def finish_aio(self) -> None:
        argv = ["bash", "-c", _WRITE_SCRIPT, "write", self._path, f"{self._mode:o}"]
        argv.append("1" if self._create_parents else "0")
        outcome = await _outcome(
            asyncio.ensure_future(
                self._box.sandbox._execute(
                    argv, cwd="/", timeout=None, limit=None, stdin=bytes(self._data)
                )
            )
        )
        if outcome.exit_code != 0:
            raise sail.errors.InternalError(f"write {self._path}: {outcome.stderr_text.strip()}")

    def abort(self) -> None:
        self._data.clear()


class LocalFileReader:
    """The core's file reader: the file's bytes as the sandbox sees them, in chunks."""

    def __init__(self, box: LocalSailbox, path: str) -> None:
        self._box, self._path = box, path

    async def __aiter__(self) -> AsyncIterator[bytes]:
        argv = ["head", "-c", str(OUTPUT_CEILING_BYTES), "--", self._path]
        run = self._box.sandbox._execute(argv, cwd="/", timeout=None, limit=None)
        outcome = await _outcome(asyncio.ensure_future(run))
        if outcome.exit_code != 0:
            raise sail.errors.FileNotFoundError(f"read {self._path}: {outcome.stderr_text.strip()}")
        for start in range(0, len(outcome.stdout), _CHUNK_BYTES):
            yield outcome.stdout[start : start + _CHUNK_BYTES]

    def close(self) -> None:
        pass


def install_local_sailboxes() -> Callable[[], None]:
    """From now on in this process, every core client sail makes (again after
    `sail.reset_transports()`) answers Sailbox calls with local sandboxes. Returns the
    function that undoes it."""
    real_get = CoreClient.__dict__["get"]

    def get(cls: type[CoreClient]) -> Any:
        if cls._instance is None:
            cls._instance = LocalSailboxCore(_core.CoreClient())
        return cls._instance

    def uninstall() -> None:
        CoreClient.get = real_get  # type: ignore[method-assign]
        CoreClient.reset()

    CoreClient.get = classmethod(get)  # type: ignore[method-assign]
    CoreClient.reset()
    return uninstall


def local_sailbox_core() -> LocalSailboxCore:
    """The current core client, which `install_local_sailboxes` must have replaced."""
    core = CoreClient.get()
    assert isinstance(core, LocalSailboxCore), "call install_local_sailboxes() first"
    return core
