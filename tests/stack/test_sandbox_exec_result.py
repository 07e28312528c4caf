"""The local sandbox reports a command as `sail.TinkerSandbox` does over a real Sailbox.

The Sailbox side is sail 0.17.1's own `TinkerSandbox.run_command`, fed by a stand-in for
`Sailbox.exec` that streams a command's bytes and then returns the `sail.ExecResult` that
`sail/exec_process.py` documents for it (124 and `timed_out` when its timeout ended it,
stderr only what the command wrote). The local side runs the same command for real in
bubblewrap. Both `SandboxResult`s must agree field by field.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

import pytest
import sail
from sail.exec_process import ExecResult
from sandbox_probes import ENV_DIR, run
from tinker_cookbook.sandbox.sandbox_interface import SandboxResult

from local_stack.client.sailbox import local_sandbox_factory
from local_stack.client.sailbox.isolation import isolation_problem
from local_stack.client.sailbox.local_sandbox import TIMEOUT_EXIT_CODE

pytestmark = pytest.mark.skipif(
    isolation_problem() is not None, reason="the local sandbox cannot run on this machine"
)


class _Stream:
    """An exec's output stream: its bytes in two chunks, as a live stream delivers them."""

    def __init__(self, data: bytes) -> None:
        self._chunks = [data[: len(data) // 2], data[len(data) // 2 :]]

    def __aiter__(self) -> _Stream:
        return self

    async def __anext__(self) -> bytes:
        if not self._chunks:
            raise StopAsyncIteration
        return self._chunks.pop(0)


class _ExecProcess:
    """What `Sailbox.exec.aio` hands `TinkerSandbox`: live streams, then the result."""

    def __init__(self, result: ExecResult) -> None:
        self.result = result
        self.stdout_bytes = _Stream(result.stdout.encode())
        self.stderr_bytes = _Stream(result.stderr.encode())
        self.killed = False

    async def wait(self) -> ExecResult:
        return self.result

    async def cancel(self, *, force: bool = False) -> None:
        self.killed = force

    def _output_gaps(self) -> tuple[bool, bool]:
        return (False, False)  # the live streams are complete


class _Exec:
    def __init__(self, result: ExecResult) -> None:
        self.result = result
        self.process: _ExecProcess | None = None

    async def aio(self, argv: list[str], *, timeout: float | None) -> _ExecProcess:
        assert argv[:2] == ["/bin/bash", "-lc"]
        self.process = _ExecProcess(self.result)
        return self.process


class _Sailbox:
    """The part of `sail.Sailbox` that `TinkerSandbox.run_command` uses."""

    sailbox_id = "sb-stand-in"

    def __init__(self, result: ExecResult) -> None:
        self.exec = _Exec(result)


async def through_tinker_sandbox(
    result: ExecResult, max_output_bytes: int | None
) -> tuple[SandboxResult, _ExecProcess]:
    """What sail's own `TinkerSandbox` returns for a Sailbox command that ended as `result`."""
    sailbox = _Sailbox(result)
    sandbox = sail.TinkerSandbox(sailbox)  # type: ignore[arg-type]
    reported = await sandbox.run_command("ignored", timeout=1, max_output_bytes=max_output_bytes)
    assert sailbox.exec.process is not None
    return reported, sailbox.exec.process


async def locally(command: str, timeout: float, max_output_bytes: int | None) -> SandboxResult:
    sandbox = await local_sandbox_factory(ENV_DIR, 120)
    try:
        return await sandbox.run_command(
            command, timeout=timeout, max_output_bytes=max_output_bytes
        )
    finally:
        await sandbox.cleanup()


def fields(result: SandboxResult) -> dict[str, Any]:
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "exit_code": result.exit_code,
        "metrics": result.metrics,
    }


def test_exec_result_documents_124_for_a_timeout_and_the_flags_the_sandbox_reports() -> None:
    source = " ".join(inspect.getsource(ExecResult).replace("#:", "").split())
    assert f"``exit_code`` is then {TIMEOUT_EXIT_CODE}" in source
    flags = {f.name for f in dataclasses.fields(ExecResult)} - {"stdout", "stderr", "exit_code"}
    assert flags == {"timed_out", "stdout_truncated", "stderr_truncated"}


# (command, timeout, max_output_bytes, the ExecResult a Sailbox returns for it)
CASES = {
    "killed at its timeout": (
        "echo started; echo 'still going' >&2; sleep 30",
        1,
        None,
        ExecResult(stdout="started\n", stderr="still going\n", exit_code=124, timed_out=True),
    ),
    "killed at its timeout, silent": (
        "sleep 30",
        1,
        None,
        ExecResult(stdout="", stderr="", exit_code=124, timed_out=True),
    ),
    "exits on its own, output cut at max_output_bytes": (
        "printf 'o%.0s' $(seq 50); printf 'e%.0s' $(seq 30) >&2; exit 3",
        10,
        16,
        ExecResult(stdout="o" * 50, stderr="e" * 30, exit_code=3),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_local_result_agrees_field_by_field_with_tinker_sandbox_over_a_sailbox(
    case: str,
) -> None:
    command, timeout, max_output_bytes, sailbox_result = CASES[case]
    on_sailbox, process = run(through_tinker_sandbox(sailbox_result, max_output_bytes))
    local = run(locally(command, timeout, max_output_bytes))
    assert fields(local) == fields(on_sailbox)
    assert set(local.metrics) == {
        f.name for f in dataclasses.fields(ExecResult) if f.type in (bool, "bool")
    }
    # TinkerSandbox kills a timed-out command before it reports it; so does the local one.
    assert process.killed == sailbox_result.timed_out


def test_a_timed_out_command_reports_124_and_nothing_appended_to_its_stderr() -> None:
    local = run(locally("echo 'last words' >&2; sleep 30", 1, None))
    assert (local.exit_code, local.metrics["timed_out"]) == (TIMEOUT_EXIT_CODE, True)
    assert local.stderr == "last words\n"


def test_a_zero_timeout_runs_nothing_and_reports_what_tinker_sandbox_reports() -> None:
    never_asked = _Sailbox(ExecResult(stdout="ran", stderr="", exit_code=0))
    on_sailbox = run(sail.TinkerSandbox(never_asked).run_command("true", timeout=0))  # type: ignore[arg-type]
    assert never_asked.exec.process is None
    assert fields(run(locally("true", 0, None))) == fields(on_sailbox)
