"""Rehearse the cloud path: every notebook with `backend="cloud"` and small parameters,
against the local stack. `make rehearse-cloud` runs it, and `.ci/run` calls that.

There is no cloud here, so only the far end differs from what a learner with keys runs. A
local stack, started in the rehearsal's own folder, answers for Tinker and Sail: the SDKs
find it through TINKER_BASE_URL and SAIL_API_URL, with the stack's fake keys (a `tml-` one
for Tinker) as TINKER_API_KEY and SAIL_API_KEY, all in the environment the kernels inherit,
never as parameters. Each kernel first loads `scripts/cloud_stand_ins.py`: orca-math rows,
the Kimi K2.6 tokenizer and Sailboxes answered on this machine. So every cloud branch runs:
the key checks, the cost estimates, sampling on Sail from signed URLs, sail's own
`TinkerSandbox`, and notebook 08's upload, validation and delete on Sail's LoRA API.

First a tiny cloud sweep runs for notebook 05 to compare. Executed notebooks, run folders
and the stack's storage and log go to `runs/rehearse-cloud-<timestamp>/` (or under `--out`).
One line per notebook says how long it took and whether it ran (if not, the failing cell's
id and error); the exit code is 1 if any failed.
`--notebooks 01 07` runs only the notebooks whose names start so.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime
from pathlib import Path

from local_stack.client.supervisor import start_local_stack, stop_local_stack
from scripts.cloud_stand_ins import write_kernel_startup

ROOT = Path(__file__).resolve().parent.parent

# Small values for the parameters the notebooks declare (each gets those it has): enough
# for every cell to run once. max_tokens stays within the local model's context.
SMALL = {
    "backend": "cloud",
    "max_tokens": "24",
    "group_size": "2",
    # Notebook 03 needs a group whose rewards differ: 2 groups of 2 drew none in 3 tries
    # about once in 20 (a CI failure); 7 make that about one in 10^5, and 14 completions
    # stay below the 8 a side before notebook 03 asserts a sign (effect_size.MIN_PER_GROUP).
    "groups": "7",
    "steps": "3",  # notebook 06's least
    "max_staleness": "2",  # at most steps - 1
    "flex_steps": "3",
    "groups_per_step": "2",
    "eval_problems": "4",
    "eval_samples": "1",
    "parity_problems": "2",
    "table_problems": "2",
    "short_run_steps": "1",
}
# The local sweep's two settings by two seeds (the least for which notebook 05 measures the
# spread between seeds and compares settings against it), at these sizes.
SWEEP_SIZES = {
    **{name: int(SMALL[name]) for name in ("max_tokens", "group_size", "groups_per_step")},
    "steps": 2,
    "eval_problems": 4,
    "eval_samples": 1,
}
SWEEP_JOBS = 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--notebooks", nargs="+", default=[""], metavar="PREFIX")
    parser.add_argument("--out", type=Path, default=ROOT / "runs", help="default: runs/")
    args = parser.parse_args(argv)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = args.out.resolve() / f"rehearse-cloud-{stamp}"
    print(f"rehearsing the cloud path into {out_dir}/", flush=True)
    use_folders(out_dir)
    # Imported only now: the course reads COURSE_RUNS_DIR once, when `helpers.runlog` loads.
    from scripts.run_notebooks import TINY_SWEEP, run_all, run_tiny_sweep

    start_local_stack()  # and point the SDKs' URLs and keys at it
    try:
        given = {**SMALL, "run_name": stamp, "runs": f"{stamp}-sweep-*"}
        prefixes = tuple(args.notebooks)
        compares = any("05_compare_runs".startswith(p) for p in prefixes)
        failed = (
            run_tiny_sweep(f"{stamp}-sweep", "cloud", {**TINY_SWEEP, **SWEEP_SIZES}, SWEEP_JOBS)
            if compares
            else 0
        )
        return run_all(out_dir, given, prefixes) or failed
    finally:
        stop_local_stack()


def use_folders(out_dir: Path) -> None:
    """Runs, the stack's storage and the kernels' IPython folder (with the stand-ins'
    startup file) under `out_dir`, for this process and every kernel it starts."""
    os.environ["COURSE_RUNS_DIR"] = str(out_dir / "runs")
    os.environ["COURSE_LOCAL_STACK_DIR"] = str(out_dir / "stack")
    os.environ["IPYTHONDIR"] = str(write_kernel_startup(out_dir / "ipython"))
    os.environ.pop("JPY_SESSION_NAME", None)  # notebooks log plain lines, as under papermill


if __name__ == "__main__":
    sys.exit(main())
