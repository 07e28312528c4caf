"""Notebook 08's containment cells hold on a Sailbox's results, not only on the local sandbox's.

The cells run here as the notebook has them, with `backend = "cloud"` and a sandbox factory
whose results are what `sail.TinkerSandbox` passes on from a Sailbox (exit code 124 and
`timed_out` on a timeout, stderr only what the command wrote; see
tests/stack/test_sandbox_exec_result.py), so no bubblewrap and no Sail are needed; and what the
notebook says of the table (`tests.containment_support.assert_contained`) holds on them.
"""

from __future__ import annotations

import ast
import asyncio
import os
import secrets
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import nbformat
import pandas as pd
import psutil
import pytest
from tinker_cookbook.sandbox.sandbox_interface import SandboxResult

from tests.containment_support import assert_contained, containment_table

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "08_sandboxed_rollouts.ipynb"
CONTAINMENT_CELL = "cell-16"


def cell_source(cell_id: str) -> str:
    [cell] = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells if c.get("id") == cell_id]
    return cell.source


async def run_cell(cell_id: str, namespace: dict[str, Any]) -> None:
    """Run a notebook cell's code (top-level awaits included) in `namespace`."""
    code = compile(cell_source(cell_id), cell_id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    pending = eval(code, namespace)  # noqa: S307 - the course's own notebook cell
    if pending is not None:
        await pending


def timed_out(stderr: str = "") -> SandboxResult:
    """A Sailbox command its timeout ended, as sail's TinkerSandbox reports it."""
    return SandboxResult(
        stdout="",
        stderr=stderr,
        exit_code=124,
        metrics={"timed_out": True, "stdout_truncated": False, "stderr_truncated": False},
    )


class SailboxLike:
    """A sandbox whose every command ends at its timeout having written nothing."""

    def __init__(self, log: list[str], fail_on_run: bool) -> None:
        self.log = log
        self.fail_on_run = fail_on_run
        self.sandbox_id = f"sb-{len(log)}"

    async def run_command(self, command: str, **_: Any) -> SandboxResult:
        if self.fail_on_run:
            raise RuntimeError("the Sailbox's host was lost")
        return timed_out()

    async def run_argv(self, argv: list[str], **_: Any) -> SandboxResult:
        return timed_out()  # the grader's tests, in a fresh Sailbox

    async def write_file(self, path: str, content: str | bytes, **_: Any) -> SandboxResult:
        return SandboxResult(stdout="", stderr="", exit_code=0, metrics={})

    async def read_file(self, path: str, **_: Any) -> SandboxResult:
        return SandboxResult(stdout="0\n", stderr="", exit_code=0, metrics={})

    async def cleanup(self) -> None:
        self.log.append("cleanup")


def containment_namespace(monkeypatch, *, fail_on_run: bool) -> tuple[dict[str, Any], list[str]]:
    from shell_tasks.harbor_task import grade_in_fresh_sandbox, load_harbor_task, run_verifier
    from shell_tasks.tamper import STRATEGIES

    monkeypatch.setenv("SAIL_API_KEY", "sk-test")
    monkeypatch.setenv("TINKER_API_KEY", "tml-test")
    log: list[str] = []
    created: list[str] = []

    async def sandbox_factory(env_dir: Path, timeout_seconds: float) -> SailboxLike:
        created.append("created")
        return SailboxLike(log, fail_on_run)

    task = load_harbor_task(NOTEBOOK.parents[1] / "tasks" / "sum_numbers")
    namespace = {
        "course": SimpleNamespace(backend="cloud"),
        "sandbox_factory": sandbox_factory,
        "task": task,
        "run_verifier": run_verifier,
        "grade_in_fresh_sandbox": grade_in_fresh_sandbox,
        "STRATEGIES": STRATEGIES,
        "one_line": lambda text, width: " ".join(text.split())[:width],
        "os": os,
        "secrets": secrets,
        "time": time,
        "psutil": psutil,
        "pd": pd,
    }
    namespace["created"] = created
    return namespace, log


def test_the_containment_cell_runs_on_sailbox_results_that_carry_no_notice(
    monkeypatch,
) -> None:
    namespace, log = containment_namespace(monkeypatch, fail_on_run=False)
    asyncio.run(run_cell(CONTAINMENT_CELL, namespace))  # an IndexError here is the defect
    table = namespace["containment"]
    assert len(table) == len(namespace["escapes"])
    # One Sailbox per row, and one more for each of the two rows graded in a fresh one.
    assert len(namespace["created"]) == len(table) + 2
    assert set(table["exit code"]) == {124} and table["timed out"].all()
    assert set(table["stderr (telling line)"]) == {""}
    assert log == ["cleanup"] * len(namespace["created"])


def test_a_containment_row_that_fails_still_cleans_its_sandbox_up(monkeypatch) -> None:
    namespace, log = containment_namespace(monkeypatch, fail_on_run=True)
    with pytest.raises(RuntimeError, match="host was lost"):
        asyncio.run(run_cell(CONTAINMENT_CELL, namespace))
    assert namespace["created"] == ["created"] and log == ["cleanup"]


def test_telling_line_is_the_commands_most_written_line_and_never_raises() -> None:
    namespace: dict[str, Any] = {}
    tree = ast.parse(cell_source(CONTAINMENT_CELL))
    [definition] = [n for n in tree.body if getattr(n, "name", "") == "telling_line"]
    exec(compile(ast.Module([definition], []), CONTAINMENT_CELL, "exec"), namespace)  # noqa: S102
    telling_line = namespace["telling_line"]
    assert telling_line(timed_out()) == ""
    assert telling_line(timed_out("first\nbash: fork: retry\n")) == "bash: fork: retry"
    # Parallel writers ran two messages together on the last line: the repeated one wins.
    full = "head: error writing 'f1': No space left on device"
    interleaved = timed_out(f"{full}\n{full}\nhead: error writhead: error writing\n")
    assert telling_line(interleaved) == full
    cut = SandboxResult(
        stdout="",
        stderr="whole line\ncut mid-li",
        exit_code=1,
        metrics={"timed_out": False, "stderr_truncated": True},
    )
    assert telling_line(cut) == "whole line"


# What the containment table can show on Sailboxes: a timeout is 124 and `timed_out`, the
# command may return well after its timeout, the network is closed, "root" can write
# anywhere in its VM, and a background process outlives its command.
SAILBOX_ROWS = {
    "infinite loop": {"exit code": 124, "timed out": True, "returned after (s)": 14.0},
    "fork bomb": {"exit code": 124, "timed out": True, "returned after (s)": 15.0},
    "1 GB of output": {"stdout bytes": 1000, "stdout (head)": "xxxx"},
    "memory: 8 x 200 MiB": {"stdout (head)": ""},
    "disk: 8 x 100 MiB in 1 MiB files": {"stdout (head)": "801"},
    "network call": {"stdout (head)": "", "stderr (telling line)": "socket.gaierror"},
    "write outside the workdir": {"stdout (head)": "wrote it"},
    "background process": {
        "stdout (head)": "started 812",
        "afterwards": "1 'sleep 300' running in its next command",
    },
    "read your secrets": {"stdout (head)": "canary: 0, key names: 0"},
    "fake the grade": {"stdout (head)": "planted", "afterwards": "graded reward 0.0"},
    "fake it from ~/.profile": {"afterwards": "graded reward 0.0"},
    "the same, graded in its own sandbox": {"afterwards": "graded reward 1.0"},
}


def check(rows: dict[str, dict[str, Any]]) -> None:
    assert_contained(containment_table(rows).to_dict("index"), "cloud", left=0)


def test_the_containment_check_holds_on_a_sailboxs_outcomes() -> None:
    check(SAILBOX_ROWS)


@pytest.mark.parametrize(
    "defect",
    [
        {"infinite loop": {"exit code": -1, "timed out": True}},  # not Sail's timeout code
        {"fork bomb": {"exit code": 124, "timed out": False}},
        {"fake the grade": {"afterwards": "graded reward 1.0"}},
        {"fake it from ~/.profile": {"afterwards": "graded reward 1.0"}},
        {"network call": {"stdout (head)": "connected"}},
    ],
)
def test_the_containment_check_still_fails_a_wrong_outcome_in_the_cloud(defect) -> None:
    rows = {name: {**row, **defect.get(name, {})} for name, row in SAILBOX_ROWS.items()}
    with pytest.raises(AssertionError):
        check(rows)
