"""Notebook 08 where the local sandbox cannot run, and where it can.

Where it cannot (no bubblewrap here; macOS and missing user namespaces take the same path),
the notebook says why in one sentence at the top, skips each cell that creates sandboxes
with one printed line, runs every other cell, and starts no command outside a sandbox.
Where it can, nothing is skipped, and the containment table holds what the notebook says of
it (read from the executed notebook: the claims that hold on any machine, not the ones a
busy machine can change, such as a fork bomb reaching its process limit within 3 s). An audit
hook in the kernel records every process the kernel starts, so "no command ran unisolated"
is checked, not assumed.

The run where it can is notebook 08's solved run (`make solutions`' copy, small sizes, on a
stack of its own with fake keys set), and three tests read it: every exercise's check passes
and nothing leaked; every command ran sandboxed, and the containment table; and the
sandboxes its check cell counts are those it created (a start-up file logs each one with its
lifetime budget). One run serves all three, where each took a run of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pytest

from budget.cost import describe_sandboxes
from budget.spend import STEP_CHECK_CASES
from local_stack.client.supervisor import stop_local_stack
from shell_tasks.sandbox_cells import MARK, SKIPPED
from shell_tasks.tamper import STRATEGIES
from tests.containment_support import assert_contained
from tests.notebook_support import (
    SMALL_PARAMETERS,
    assert_clean_local_run,
    assert_every_check_passes,
    finish,
    kernel_env,
    papermill,
    probe,
    probe_cell,
    small,
    solved_copy,
)

NOTEBOOK = "08_sandboxed_rollouts.ipynb"
# Runs in the kernel at start-up (an IPython startup file): logs the argv of each process
# it starts, by subprocess, os.exec*, os.posix_spawn, os.spawn* or os.system.
AUDIT_STARTUP = """
import json, os, sys

def _log_process_starts(event, args):
    where = {"subprocess.Popen": 1, "os.exec": 1, "os.posix_spawn": 1, "os.spawn": 2}
    if event == "os.system":
        argv = [os.fsdecode(args[0])]
    elif event in where:
        argv = args[where[event]]
        argv = [argv] if isinstance(argv, (str, bytes)) else argv
        argv = [os.fsdecode(word) for word in argv]
    else:
        return
    with open(os.environ["COURSE_TEST_PROCESS_LOG"], "a") as log:
        log.write(json.dumps(argv) + "\\n")

sys.addaudithook(_log_process_starts)
"""
# What the containment cell measured, printed by a last cell the test appends.
CONTAINMENT = """{
    "rows": json.loads(containment.to_json(orient="index")),
    "left": len(left),
    "totals_enforced": totals_enforced,
    "memory_peak_bytes": memory_peak,
    "limits": {"memory_bytes": limits.memory_bytes, "disk_bytes": limits.disk_bytes},
}"""


# A start-up file for notebook 08's kernel: every local sandbox created is logged with its
# lifetime budget. The notebook's factory, `shell_tasks.sandboxes.local_task_sandbox`, looks
# up the stack's factory each time it creates a sandbox, so it finds this wrapper.
SANDBOX_LOG = """
import functools
import os

import local_stack.client.sailbox
import local_stack.client.sailbox.local_sandbox as module

_create = module.local_sandbox_factory


@functools.wraps(_create)
async def local_sandbox_factory(env_dir, timeout_seconds=None, **settings):
    with open(os.environ["COURSE_TEST_SANDBOX_LOG"], "a") as log:
        log.write(f"{timeout_seconds}\\n")
    return await _create(env_dir, timeout_seconds, **settings)


module.local_sandbox_factory = local_sandbox_factory
local_stack.client.sailbox.local_sandbox_factory = local_sandbox_factory
"""
# The solved run's sizes: the small profile, but for a group size that differs from its
# steps and groups per step, so that the sandbox count tells each factor apart.
SOLVED = small(NOTEBOOK, group_size=3, run_name="solved-07")


def path_without_bwrap(folder: Path) -> str:
    """A PATH with every program of this one but bubblewrap: links in one folder."""
    folder.mkdir()
    for directory in filter(os.path.isdir, os.environ["PATH"].split(os.pathsep)):
        for program in Path(directory).iterdir():
            link = folder / program.name  # the first of a name on PATH wins, as on PATH
            if program.name != "bwrap" and not os.path.lexists(link):
                link.symlink_to(program)
    return str(folder)


def run_notebook_07(env: dict, tmp_path: Path) -> tuple[nbformat.NotebookNode, list[list[str]]]:
    """Run notebook 08 under papermill; return the executed notebook and the kernel's process
    starts."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "log_process_starts.py").write_text(AUDIT_STARTUP)
    process_log = tmp_path / "processes.jsonl"
    env = {
        **env,
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "COURSE_TEST_PROCESS_LOG": str(process_log),
    }
    out = tmp_path / NOTEBOOK
    code, log = finish(papermill(NOTEBOOK, out, SMALL_PARAMETERS[NOTEBOOK], env))
    assert code == 0, log[-3000:]
    started = (
        [json.loads(line) for line in process_log.read_text().splitlines()]
        if process_log.exists()
        else []
    )
    return nbformat.read(out, as_version=4), started


@dataclass
class SolvedRun:
    """The solved notebook's run with the sandbox: what it wrote and printed, the processes
    its kernel started, and the lifetime budget of each sandbox it created."""

    executed: nbformat.NotebookNode
    started: list[list[str]]
    sandbox_lifetimes: list[float]


@pytest.fixture(scope="module")
def solved_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SolvedRun]:
    """Run the solved notebook 08, with a probe cell at the end (what the containment cell
    measured), its process starts and sandboxes logged, on a stack of its own."""
    folder = tmp_path_factory.mktemp("solved-07")
    book = nbformat.read(solved_copy(NOTEBOOK.removesuffix(".ipynb"), folder / "solved"), 4)
    book.cells.append(probe_cell(CONTAINMENT))
    notebook = folder / "probed" / NOTEBOOK
    notebook.parent.mkdir()
    nbformat.write(book, notebook)
    startup = folder / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "log_process_starts.py").write_text(AUDIT_STARTUP)
    (startup / "sandbox_log.py").write_text(SANDBOX_LOG)
    sandbox_log = folder / "sandboxes.log"
    process_log = folder / "processes.jsonl"
    env = kernel_env(
        folder,
        COURSE_TEST_PROCESS_LOG=str(process_log),
        COURSE_TEST_SANDBOX_LOG=str(sandbox_log),
    )
    out = folder / NOTEBOOK
    try:
        code, log = finish(papermill(str(notebook), out, SOLVED, env))
        assert code == 0, log[-3000:]
        assert_clean_local_run(out, env, folder, log)
        yield SolvedRun(
            executed=nbformat.read(out, as_version=4),
            started=[json.loads(line) for line in process_log.read_text().splitlines()],
            sandbox_lifetimes=[float(t) for t in sandbox_log.read_text().split()],
        )
    finally:
        stop_local_stack(folder / "stack")


def printed(cell) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []) if o.output_type == "stream")


def needs_sandbox(cell) -> bool:
    return cell.cell_type == "code" and cell.source.startswith(MARK + "\n")


def is_local_stack(argv: list[str]) -> bool:
    return argv[1:3] == ["-m", "local_stack"]


def test_without_the_sandbox_it_says_why_skips_sandbox_cells_and_runs_the_rest(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    shared_stack_env["PATH"] = path_without_bwrap(tmp_path / "bin")
    executed, started = run_notebook_07(shared_stack_env, tmp_path)
    setup = next(c for c in executed.cells if "prepare_sandbox_cells(" in c.source)
    [sentence] = [line for line in printed(setup).splitlines() if "sandbox" in line]
    assert sentence.startswith("The local sandbox cannot run on this machine, because `bwrap`")
    assert "shell_tasks.sandboxes.sailbox_factory" in sentence
    marked = [c for c in executed.cells if needs_sandbox(c)]
    # seven of the core path (the step's check among them, four of the training section), six
    # optional ones (held-out bars, scripts, creation, limits, containment, tamper suite)
    assert len(marked) == 13
    for cell in marked:
        # One line on stdout, which a busy kernel may flush as two stream outputs.
        assert {(o.output_type, o.name) for o in cell.outputs} == {("stream", "stdout")}
        assert printed(cell) == SKIPPED + "\n"
    others = [c for c in executed.cells if c.cell_type == "code" and not needs_sandbox(c)]
    assert all(c.execution_count for c in others)  # every other cell ran
    # No command ran at all, let alone unisolated: the kernel started nothing (the session's
    # stack was running), or only a stack.
    assert all(is_local_stack(argv) for argv in started), started


def test_the_solved_notebook_runs_and_every_check_passes(solved_run: SolvedRun) -> None:
    assert_every_check_passes(solved_run.executed, NOTEBOOK.removesuffix(".ipynb"))


def test_with_the_sandbox_every_cell_runs_and_every_command_is_sandboxed(
    solved_run: SolvedRun,
) -> None:
    assert shutil.which("bwrap"), "this check needs bubblewrap installed"
    executed, started = solved_run.executed, solved_run.started
    assert SKIPPED not in "".join(printed(c) for c in executed.cells)
    assert all(c.execution_count for c in executed.cells if c.cell_type == "code")
    # Besides the stack and the mounts of the sandboxes' own disks, the kernel started only
    # launchers of bubblewrap, and many: the notebook's commands ran, all inside it.
    mounts = [a for a in started if a[0] in ("mount", "umount")]
    assert all(a[-1].startswith(tempfile.gettempdir() + "/local-sandbox-") for a in mounts)
    launches = [a for a in started if not is_local_stack(a) and a not in mounts]
    assert all("bwrap" in argv for argv in launches)
    assert len(launches) >= 20
    measured = probe(executed)
    limits = SimpleNamespace(**measured["limits"])
    assert_contained(
        measured["rows"],
        "local",
        measured["left"],
        measured["totals_enforced"],
        measured["memory_peak_bytes"],
        limits,
    )


def test_07_counts_the_sandboxes_it_creates_and_their_lifetimes(solved_run: SolvedRun) -> None:
    """What the check cell says of sandboxes is what the notebook then creates."""
    from local_stack.client.sailbox.isolation import isolation_problem

    if (problem := isolation_problem()) is not None:
        pytest.skip(f"no local sandbox here: {problem}")
    created = Counter(round(lifetime) for lifetime in solved_run.sandbox_lifetimes)
    steps, groups, group_size = SOLVED["steps"], SOLVED["groups_per_step"], SOLVED["group_size"]
    training = steps * groups * group_size
    held_out = 2 * SOLVED["eval_tasks"] * SOLVED["eval_samples"]  # before and after
    # By hand and containment; four groups and the step check's cases; one per training and
    # held-out rollout. Grading: one more per graded rollout (the first group by the chosen
    # step, then training and held-out), per graded containment row, and per tamper strategy,
    # besides that strategy's own two; and the step check's, at most two per case (the
    # learner's step and the course's, for a case that gets as far as grading), which the
    # solved step reaches.
    strategies, cases = len(STRATEGIES), STEP_CHECK_CASES
    estimated = {
        80: group_size + 2 * cases,
        90: 2 + strategies,
        120: 1 + 12 + training + held_out,
        300: 2 * strategies,
        600: 4 * group_size + cases + training + held_out,
    }
    assert created == {**estimated, 80: created[80]}
    assert group_size < created[80] <= estimated[80]  # the check graded, within its estimate
    shown = "".join(
        o.get("text", "") for c in solved_run.executed.cells for o in c.get("outputs", [])
    )
    assert describe_sandboxes(estimated, "local") in shown
