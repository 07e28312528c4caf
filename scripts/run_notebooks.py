"""Execute every course notebook in order with papermill, on the local backend.

`make run` calls this. Executed notebooks go to `runs/<timestamp>/`, and so does
notebook 04's run folder (metrics, figure), because its `run_name` is that timestamp; 05
then evaluates that run. The optional 10 (`OPTIONAL_NOTEBOOKS`) is left out.
One line per notebook says how long it took and whether it ran. Extra `-p name value`
pairs are passed to every notebook that has that parameter.

First it runs a tiny sweep (`TINY_SWEEP` at notebook 04's `tiny-sweep` size profile, see
sweeps/runner.py) for the comparison notebook to compare: its runs are
`runs/<timestamp>-sweep-*`.

On the local backend the notebooks' kernels share one local stack. If none was running,
this starts it first (so no notebook waits for it) and stops it at the end; one that was
running (a JupyterLab session's) is used and left running.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
import papermill

from helpers.notebook_parameters import profile
from sweeps import runner as sweep
from sweeps.notebook_runs import ROOT, execute, local_stack_for

# Two learning rates, two seeds, a few short steps: the least that lets the comparison
# notebook set a difference between settings against the noise between seeds.
TINY_SWEEP = {"learning_rate": [1e-3, 3e-3], "seed": [0, 1]}

# Optional notebooks `make run` leaves out (the cloud rehearsal runs them too): 10 trains two
# more runs for minutes to test a grader's hole.
OPTIONAL_NOTEBOOKS = ("10_reward_hacking.ipynb",)

# Notebooks that train a run of their own, beside notebook 04's: each gets the given run_name
# with this suffix, so its metrics.jsonl never lands in notebook 04's run folder.
OWN_RUN_FOLDER = {
    "10_reward_hacking.ipynb": "loophole",
    "08_sandboxed_rollouts.ipynb": "sandboxed-shell",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-p", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    args = parser.parse_args()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = ROOT / "runs" / stamp
    out_dir.mkdir(parents=True)
    given = {"run_name": stamp, **dict(args.p)}
    print(f"executing notebooks into {out_dir.relative_to(ROOT)}/")
    backend = given.get("backend", "local")
    with local_stack_for(backend):
        given["runs"] = f"{stamp}-sweep-*"
        failed = run_tiny_sweep(f"{stamp}-sweep", backend)
        return run_all(out_dir, given, skip=OPTIONAL_NOTEBOOKS) or failed


def run_tiny_sweep(name: str, backend: str, size: str = "tiny-sweep", jobs: int = 2) -> int:
    """The sweep the comparison notebook compares, at notebook 04's size profile `size`; 1 if
    any of its runs failed. Two runs at a time by default: a tiny run is mostly its kernel
    starting and importing, one core's work, so two cores take two runs at once."""
    start = time.monotonic()
    grid = {**profile(sweep.NOTEBOOK.stem, size), **TINY_SWEEP, "backend": backend}
    runs = sweep.plan(grid, name)
    sweep.check(runs)
    failed = sweep.Sweep(runs, jobs=jobs).run()
    status = "failed" if failed else "ok"
    print(f"{'sweep ' + name:36s} {time.monotonic() - start:6.1f} s  {status}", flush=True)
    return 1 if failed else 0


def run_all(
    out_dir: Path,
    given: dict[str, object],
    prefixes: tuple[str, ...] = ("",),
    size: str | None = None,
    skip: tuple[str, ...] = (),
) -> int:
    """Every notebook (or those whose names start with one of `prefixes`) but those named in
    `skip`, in order, at its size profile `size` if one is named, with the `given` parameters
    it declares on top; 1 if any failed."""
    failed = 0
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb")):
        if not notebook.name.startswith(prefixes) or notebook.name in skip:
            continue
        declared = papermill.inspect_notebook(str(notebook))
        parameters = profile(notebook.stem, size) if size else {}
        parameters |= {name: _literal(v) for name, v in given.items() if name in declared}
        if notebook.name in OWN_RUN_FOLDER and "run_name" in parameters:
            parameters["run_name"] = f"{parameters['run_name']}-{OWN_RUN_FOLDER[notebook.name]}"
        start = time.monotonic()
        try:
            execute(notebook, out_dir / notebook.name, parameters)
            status = "ok"
        except papermill.PapermillExecutionError as error:  # name the cell, and go on
            reason = (error.evalue.splitlines() or [""])[0][:160]
            status = (
                f"failed in cell {_failed_cell(out_dir / notebook.name)}: {error.ename}: {reason}"
            )
            failed += 1
        except Exception as error:  # report and go on: later notebooks may still run
            status = f"failed ({type(error).__name__})"
            failed += 1
        print(f"{notebook.name:36s} {time.monotonic() - start:6.1f} s  {status}", flush=True)
    return 1 if failed else 0


def _failed_cell(executed: Path) -> str:
    """The id of the cell whose error stopped `executed`."""
    cells = nbformat.read(executed, as_version=4).cells
    outputs = [(cell, output) for cell in cells for output in cell.get("outputs", [])]
    return next((cell.get("id", "?") for cell, o in outputs if o.output_type == "error"), "?")


def _literal(value: str) -> object:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


if __name__ == "__main__":
    sys.exit(main())
