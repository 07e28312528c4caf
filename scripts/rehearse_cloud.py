"""Rehearse the cloud path: every notebook with `backend="cloud"` and small parameters,
against the local stack. `make rehearse-cloud` runs it, and `.ci/run` calls that.

There is no cloud here, so only the far end differs from what a learner with keys runs. A
local stack, started in the rehearsal's own folder, answers for Tinker and Sail: the SDKs
find it through TINKER_BASE_URL and SAIL_API_URL, with the stack's fake keys (a `tml-` one
for Tinker) as TINKER_API_KEY and SAIL_API_KEY, all in the environment the kernels inherit,
never as parameters. Each kernel first loads `scripts/cloud_stand_ins.py`: orca-math rows,
the Kimi K2.6 tokenizer and Sailboxes answered on this machine. So every cloud branch runs:
the key checks, the cost estimates, sampling on Sail from signed URLs, sail's own
`TinkerSandbox`, and notebook 09's upload, validation and delete on Sail's LoRA API.
Before the notebooks, the tamper suite runs on stand-in Sailboxes (`scripts/rehearse_tamper.py`)
when notebook 08 is among them.

First a tiny cloud sweep runs for notebook 06 to compare. Executed notebooks, run folders
and the stack's storage and log go to `runs/rehearse-cloud-<timestamp>/` (or under `--out`).
One line per notebook says how long it took and whether it ran (if not, the failing cell's
id and error); the exit code is 1 if any failed.
`--notebooks 01 07` runs only the notebooks whose names start so (and the sweep, the tamper
suite and the fault runs only with the notebook each belongs to: 05, 07, 04).

Meanwhile, in a process of its own, notebook 04 runs once under each fault a real account
meets (`FAULTS`), injected by a stack of that process's own (COURSE_SAIL_FAULTS, see
`local_stack.control.knobs`): a 429, a 5xx and a request that times out must be retried
within bounds (the run's metrics count the retries), and a checkpoint that expired or a
refused key must stop the run with one sentence naming the cause. One line per fault says
which happened. `--no-faults` skips them. (They mostly wait, on the injected timeouts and
a new stack per fault; run after the notebooks, they took about four of the rehearsal's
nine minutes.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from datetime import datetime
from pathlib import Path

import papermill

from helpers.notebook_parameters import profile
from local_stack.client.control_client import get_stats
from local_stack.client.supervisor import start_local_stack, stop_local_stack
from scripts.cloud_stand_ins import write_kernel_startup
from scripts.rehearse_tamper import rehearse_tamper_suite

ROOT = Path(__file__).resolve().parent.parent

# Each notebook runs at its `rehearsal` size profile (helpers/notebook_parameters.py): enough
# for every cell to run once, within the local model's context. The sweep runs notebook 04's
# two settings by two seeds (the least for which notebook 06 measures the spread between seeds
# and compares settings against it), at the same profile.
SIZE = "rehearsal"
SWEEP_JOBS = 2

# Each fault at a share of Sail's responses, and what notebook 04 must do under it: finish
# (None; the fault is retried) or stop with an error naming the cause (the text it contains).
FAULTS = {
    "a 429 (rate limit)": ("http429=0.3", None),
    "a 5xx (server error)": ("http500=0.3", None),
    # Each injected timeout costs the course's 60 s request timeout: 0.3 injects two, as for
    # the faults above (one random stream, seeded the same on each new stack), where 0.4 did 3.
    "a request that times out": ("timeout=0.3", None),
    "an expired checkpoint": ("checkpoint_expired=1", "Tinker no longer has it"),
    "a refused key": ("unauthorized=1", "Sail refused the API key"),
}
FAULT_RUN = {"steps": "2", "eval_problems": "2"}  # on top of SIZE: retries need requests


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notebooks", nargs="+", default=[""], metavar="PREFIX")
    parser.add_argument("--out", type=Path, default=ROOT / "runs", help="default: runs/")
    parser.add_argument("--no-faults", action="store_true", help="skip the fault runs")
    args = parser.parse_args(argv)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out.resolve() / f"rehearse-cloud-{stamp}"
    print(f"rehearsing the cloud path into {out_dir}/", flush=True)
    use_folders(out_dir)
    given = {"backend": "cloud", "run_name": stamp, "runs": f"{stamp}-sweep-*"}
    prefixes = tuple(args.notebooks)
    faults = None
    if selected("04_training_loop", prefixes) and not args.no_faults:
        # Forked before this process starts its stack or any kernel: the child sets its own.
        faults = multiprocessing.get_context("fork").Process(
            target=_rehearse_faults_apart, args=(out_dir, {**given, **FAULT_RUN})
        )
        faults.start()
    # Imported only now: the course reads COURSE_RUNS_DIR once, when `helpers.runlog` loads.
    from scripts.run_notebooks import run_all, run_tiny_sweep

    failed = 0
    try:
        start_local_stack()  # and point the SDKs' URLs and keys at it
        try:
            if selected("08_sandboxed_rollouts", prefixes):
                failed = rehearse_tamper_suite()
            if selected("06_compare_runs", prefixes):
                failed = run_tiny_sweep(f"{stamp}-sweep", "cloud", SIZE, SWEEP_JOBS) or failed
            failed = run_all(out_dir, given, prefixes, SIZE) or failed
        finally:
            stop_local_stack()
    finally:
        if faults is not None:
            faults.join()
    if faults is not None and faults.exitcode != 0:
        failed = 1
    return failed


def selected(notebook: str, prefixes: tuple[str, ...]) -> bool:
    return any(notebook.startswith(prefix) for prefix in prefixes)


def _rehearse_faults_apart(out_dir: Path, given: dict[str, str]) -> None:
    """`rehearse_faults` in a forked process, with stacks in a folder of their own (the
    notebooks' stack runs meanwhile, in `out_dir/stack`); its exit code says if any failed."""
    os.environ["COURSE_LOCAL_STACK_DIR"] = str(out_dir / "fault-stack")
    sys.exit(rehearse_faults(out_dir, given))


def rehearse_faults(out_dir: Path, given: dict[str, str]) -> int:
    """Notebook 04 under each of FAULTS, on a stack started with that fault; 1 if any run
    did not do what the course promises."""
    from scripts.run_notebooks import _literal
    from sweeps.notebook_runs import execute

    notebook = ROOT / "notebooks" / "04_training_loop.ipynb"
    declared = papermill.inspect_notebook(str(notebook))
    failed = 0
    for number, (fault, (setting, stops_with)) in enumerate(FAULTS.items()):
        run_name = f"{given['run_name']}-fault-{number}"
        parameters = profile(notebook.stem, SIZE)
        parameters |= {name: _literal(v) for name, v in given.items() if name in declared}
        os.environ["COURSE_SAIL_FAULTS"] = setting
        start = time.monotonic()
        stack = start_local_stack()
        try:
            execute(
                notebook, out_dir / f"04-fault-{number}.ipynb", {**parameters, "run_name": run_name}
            )
            error = None
        except papermill.PapermillExecutionError as raised:
            error = f"{raised.ename}: {(raised.evalue.splitlines() or [''])[0]}"
        finally:
            injected = sum(get_stats(stack.url)["faults_injected"].values())
            stop_local_stack()
            del os.environ["COURSE_SAIL_FAULTS"]
        records = _records(run_name)
        retries = sum(r.get("sail_retries", 0) for r in records)
        dropped = sum(r["dropped_rollouts"] for r in records)
        if stops_with is None and error is None and injected == 0:
            failed = 1
            outcome = "FAILED: finished, but no fault was injected: nothing was rehearsed"
        elif stops_with is None and error is None:
            outcome = (
                f"ok: finished; {injected} injected, and in its training steps {retries} "
                f"retried, {dropped} rollouts dropped"
            )
        elif stops_with is not None and error is not None and stops_with in error:
            outcome = f"ok: stopped with {error}"
        else:
            failed = 1
            outcome = f"FAILED: {error or 'finished, but should have stopped'}"
        took = time.monotonic() - start
        print(
            f"{'04 with ' + fault + ' (' + setting + ')':62s} {took:6.1f} s  {outcome}", flush=True
        )
    return failed


def _records(run_name: str) -> list[dict]:
    metrics = Path(os.environ["COURSE_RUNS_DIR"]) / run_name / "metrics.jsonl"
    if not metrics.exists():
        return []
    return [json.loads(line) for line in metrics.read_text().splitlines() if line]


def use_folders(out_dir: Path) -> None:
    """Runs, the stack's storage and the kernels' IPython folder (with the stand-ins'
    startup file) under `out_dir`, for this process and every kernel it starts."""
    os.environ["COURSE_RUNS_DIR"] = str(out_dir / "runs")
    os.environ["COURSE_LOCAL_STACK_DIR"] = str(out_dir / "stack")
    os.environ["IPYTHONDIR"] = str(write_kernel_startup(out_dir / "ipython"))
    os.environ.pop("JPY_SESSION_NAME", None)  # notebooks log plain lines, as under papermill


if __name__ == "__main__":
    sys.exit(main())
