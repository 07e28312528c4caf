"""What tests that execute a notebook share: the one builder of a kernel's environment, the
papermill run, and readers of what an executed notebook shows.

Fake cloud keys go into every local run's environment; they must never show up anywhere the
run writes (`assert_no_key_leaks`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pandas as pd
import psutil

from helpers.notebook_parameters import profile
from scripts.cloud_stand_ins import write_kernel_startup
from tests.try_this_support import edited_cells

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
FAKE_KEYS = {
    "TINKER_API_KEY": "tml-fake-leak-canary-tinker-7f3a",
    "SAIL_API_KEY": "sk_fake_leak_canary_sail_7f3a",
    "HF_TOKEN": "hf_fake_leak_canary_hub_7f3a",
}


def small(notebook: str, **choices: object) -> dict:
    """`notebook`'s `small` size profile (helpers/notebook_parameters.py), `choices` on top."""
    return {**profile(notebook.removesuffix(".ipynb"), "small"), **choices}


# Each notebook's small sizes, with non-default choices for the parameters that are no size.
SMALL_PARAMETERS = {
    "01_scoring.ipynb": small("01_scoring", example_index=5),
    "02_snapshot_and_serve.ipynb": small("02_snapshot_and_serve", example_index=3)
    | {"completion_window": "flex"},
    "04_training_loop.ipynb": small("04_training_loop", run_name="papermill-small"),
    "10_reward_hacking.ipynb": small("10_reward_hacking", run_name="papermill-small"),
    "08_sandboxed_rollouts.ipynb": small("08_sandboxed_rollouts", run_name="papermill-small"),
}
PROBE = "PROBE "  # the prefix of the JSON line a test's probe cell prints


def kernel_env(folder: Path, *, cloud: bool = False, **extra: str) -> dict[str, str]:
    """The environment of a notebook's kernel: runs/ and the IPython folder (its history, in
    reach of leak checks) under `folder`, then `extra`.

    Local (the default): a stack of its own in `folder/stack` (the caller stops it: stacks
    outlive kernels) and fake cloud keys. Cloud: the process's own SDK settings (the
    `local_stack` fixture points them at the session's stack) and a kernel that loads the
    cloud path's stand-ins first (`scripts/cloud_stand_ins.py`)."""
    env = {
        **os.environ,
        "COURSE_RUNS_DIR": str(folder / "runs"),
        "PYTHONPATH": str(ROOT),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    if cloud:
        env["IPYTHONDIR"] = str(write_kernel_startup(folder / "ipython"))
    else:
        env.update(FAKE_KEYS)
        env["COURSE_LOCAL_STACK_DIR"] = str(folder / "stack")
        env["IPYTHONDIR"] = str(folder / "ipython")
    env.update(extra)
    env.pop("JPY_SESSION_NAME", None)  # notebooks log plain lines, as under papermill
    return env


# papermill's command line (`python -m papermill`) less one import. nbformat loads jsonschema,
# whose optional check of the "iri" string format imports rfc3987_syntax, which compiles a
# grammar as it loads: 1.3 of the 1.9 s of CPU papermill took to start, in every one of the
# suite's papermill runs, for a format no notebook schema uses. A module set to None in
# sys.modules fails to import, and jsonschema then leaves that one check out.
PAPERMILL = [
    sys.executable,
    "-c",
    "import sys; sys.modules['rfc3987_syntax'] = None; from papermill.cli import papermill; "
    "papermill()",
]


def papermill(notebook: str, out: Path, parameters: dict, env: dict, **kwargs) -> subprocess.Popen:
    """Start papermill on `notebook` (a name in notebooks/ or a path) from the repository root,
    where the README's papermill example starts it: the kernel starts there too. nbval (and
    tests/long/test_loophole.py's run of 04) start kernels in notebooks/, as JupyterLab
    does; so every notebook runs from both, and a path spelled relative to one of them fails."""
    args = [*PAPERMILL, str(NOTEBOOKS / notebook), str(out)]
    args += ["--kernel", "python3", "--no-progress-bar"]
    for name, value in parameters.items():
        args += ["-p", name, str(value)]
    return subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        **kwargs,
    )  # fmt: skip


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def run(notebook: str | Path, out: Path, parameters: dict, env: dict) -> nbformat.NotebookNode:
    """Execute `notebook` (a name in notebooks/ or a path) with papermill; the executed copy."""
    code, log = finish(papermill(str(notebook), out, parameters, env))
    executed = nbformat.read(out, as_version=4)
    executed.metadata["exit_code"], executed.metadata["log"] = code, log
    return executed


def succeeded(executed: nbformat.NotebookNode) -> nbformat.NotebookNode:
    assert executed.metadata["exit_code"] == 0, executed.metadata["log"][-3000:]
    return executed


def printed(executed: nbformat.NotebookNode, needle: str) -> str:
    """Everything the one code cell whose source contains `needle` showed as text."""
    [cell] = [c for c in executed.cells if c.cell_type == "code" and needle in c.source]
    parts = []
    for output in cell.outputs:
        parts.append(output.get("text", ""))
        parts.append(output.get("data", {}).get("text/plain", ""))
    return "".join(parts)


def printed_text(executed: nbformat.NotebookNode) -> str:
    """What the whole notebook printed and the Markdown it rendered."""
    return "".join(
        output.get("text", "") + output.get("data", {}).get("text/markdown", "")
        for cell in executed.cells
        for output in cell.get("outputs", [])
    )


def run_table(run_folder: Path, stem: str) -> pd.DataFrame:
    """One of the CSV tables a notebook writes to its run folder, indexed by its first column."""
    return pd.read_csv(run_folder / f"{stem}.csv", index_col=0)


def probe(executed: nbformat.NotebookNode) -> dict:
    """The JSON a probe cell (a last cell a test appended) printed after `PROBE`."""
    for cell in executed.cells:
        for output in cell.get("outputs", []):
            for line in output.get("text", "").splitlines():
                if line.startswith(PROBE):
                    return json.loads(line.removeprefix(PROBE))
    raise AssertionError("the probe cell printed nothing")


def assert_no_key_leaks(*texts: str) -> None:
    for text in texts:
        for name, value in FAKE_KEYS.items():
            assert value not in text, f"{name} leaked"


def error_outputs(executed: nbformat.NotebookNode) -> list:
    """The error outputs of an executed notebook, in cell order."""
    return [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]


def assert_clean_local_run(out: Path, env: dict, folder: Path, *logs: str) -> None:
    """The local run that wrote `out` with `env` showed no error, its stack wrote a log, and
    no fake key is in `logs` or in any file under `folder`."""
    assert not error_outputs(nbformat.read(out, as_version=4))
    assert (Path(env["COURSE_LOCAL_STACK_DIR"]) / "stack.log").exists()
    assert_no_key_leaks(*logs, all_text_under(folder))


def all_text_under(folder: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


def metrics_steps(runs: Path, run_name: str) -> list[int]:
    path = runs / run_name / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line]


def started_with(env: dict) -> list[psutil.Process]:
    """Papermill, its kernel and the kernel's local stack: every process that carries this
    run's COURSE_RUNS_DIR in its environment."""
    marker = env["COURSE_RUNS_DIR"]
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("COURSE_RUNS_DIR") == marker:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def kill_everything_started_with(env: dict) -> None:
    """SIGKILL the whole run: no process gets to exit cleanly."""
    victims = started_with(env)
    for process in victims:
        process.kill()
    psutil.wait_procs(victims, timeout=10)


def probe_cell(probe_code: str, steps: str = "") -> nbformat.NotebookNode:
    """A code cell that runs `steps` and prints `PROBE <json of probe_code>`."""
    code = f"import json\n\n{steps}\nprint({PROBE!r} + json.dumps({probe_code}))"
    return nbformat.v4.new_code_cell(code)


def with_probe(
    notebook: str,
    folder: Path,
    probe_code: str,
    edits: list[tuple[str, str, str]] = (),
    after: str | None = None,
    steps: str = "",
) -> Path:
    """A copy of `notebook` with each (cell needle, old, new) replacement made, as the
    bullet tells a learner to, and a cell that runs `steps` (what a bullet says to type)
    and prints `PROBE <json>`: after the code cell whose source contains `after`, or last."""
    nb = nbformat.read(NOTEBOOKS / notebook, as_version=4)
    nb.cells = edited_cells(notebook, edits)
    probe = probe_cell(probe_code, steps)
    if after is None:
        nb.cells.append(probe)
    else:
        [index] = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and after in c.source]
        nb.cells.insert(index + 1, probe)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"edited-{notebook}"
    nbformat.write(nb, path)
    return path


def solved_copy(notebook: str, folder: Path) -> Path:
    """`make solutions`' copy of `notebook` (a stem), every exercise solved, written in `folder`."""
    from scripts.make_solutions import write_solutions  # imported here: conftest imports us

    [solved] = [p for p in write_solutions(folder) if p.stem == notebook]
    return solved


def assert_every_check_passes(executed: nbformat.NotebookNode, notebook: str) -> None:
    """A solved run of `notebook` (a stem): no error, every exercise's check printed its pass,
    and no cell fell back to the course's reference."""
    from exercises import all_exercises  # imported here: it loads torch, and conftest imports us

    assert not error_outputs(executed)
    shown = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    for exercise in all_exercises().values():
        if exercise.notebook == notebook:
            assert f"✓ `{exercise.name}` passes" in shown, shown[-3000:]
    assert "is not written yet" not in shown
