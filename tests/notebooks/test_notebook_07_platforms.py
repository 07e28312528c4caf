"""Notebook 07 where the local sandbox cannot run, and where it can.

Where it cannot (no bubblewrap here; macOS and missing user namespaces take the same path),
the notebook says why in one sentence at the top, skips each cell that creates sandboxes
with one printed line, runs every other cell, and starts no command outside a sandbox.
Where it can, nothing is skipped, and the containment table holds what the notebook says of
it (read from the executed notebook: the claims that hold on any machine, not the ones a
busy machine can change, such as a fork bomb reaching its process limit within 3 s). An audit
hook in the kernel records every process the kernel starts, so "no command ran unisolated"
is checked, not assumed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

import nbformat

from shell_tasks.sandbox_cells import MARK, SKIPPED
from tests.containment_support import assert_contained
from tests.notebook_support import SMALL_PARAMETERS, finish, papermill, probe, with_probe

NOTEBOOK = "07_sandboxed_rollouts.ipynb"
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


def path_without_bwrap(folder: Path) -> str:
    """A PATH with every program of this one but bubblewrap: links in one folder."""
    folder.mkdir()
    for directory in filter(os.path.isdir, os.environ["PATH"].split(os.pathsep)):
        for program in Path(directory).iterdir():
            link = folder / program.name  # the first of a name on PATH wins, as on PATH
            if program.name != "bwrap" and not os.path.lexists(link):
                link.symlink_to(program)
    return str(folder)


def run_notebook_07(
    env: dict, tmp_path: Path, notebook: str = NOTEBOOK
) -> tuple[nbformat.NotebookNode, list[list[str]]]:
    """Run notebook 07 (or an edited copy, by path) under papermill; return the executed
    notebook and the kernel's process starts."""
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
    code, log = finish(papermill(notebook, out, SMALL_PARAMETERS[NOTEBOOK], env))
    assert code == 0, log[-3000:]
    started = (
        [json.loads(line) for line in process_log.read_text().splitlines()]
        if process_log.exists()
        else []
    )
    return nbformat.read(out, as_version=4), started


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
    # five of the first part (the step's check among them), five of the training section, the
    # optional tamper suite
    assert len(marked) == 11
    for cell in marked:
        assert [o.output_type for o in cell.outputs] == ["stream"]
        assert printed(cell) == SKIPPED + "\n"
    others = [c for c in executed.cells if c.cell_type == "code" and not needs_sandbox(c)]
    assert all(c.execution_count for c in others)  # every other cell ran
    # No command ran at all, let alone unisolated: the kernel started nothing (the session's
    # stack was running), or only a stack.
    assert all(is_local_stack(argv) for argv in started), started


def test_with_the_sandbox_every_cell_runs_and_every_command_is_sandboxed(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    assert shutil.which("bwrap", path=shared_stack_env["PATH"]), (
        "this check needs bubblewrap installed"
    )
    probed = with_probe(NOTEBOOK, tmp_path / "probed", CONTAINMENT)
    executed, started = run_notebook_07(shared_stack_env, tmp_path, str(probed))
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
