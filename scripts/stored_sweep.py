"""Notebook 06's stored comparison: a sweep of runs long enough to differ, kept in
measurements/stored_sweep.json with the command, date and commit.

Runs the grid file sweeps/stored.toml exactly as `make sweep SWEEP="--grid sweeps/stored.toml"`
does (notebook 04 at its `long-sweep` size profile, three learning rates, two seeds each, one
run at a time, each in runs/stored-*), then stores every run's settings, training curve and
held-out counts per problem before and after training (`sweeps.stored`), and prints each
run's held-out reward gains with their 95% intervals. Interrupted, it resumes: runs that
finished are not run again. Extra arguments go to the sweep (e.g. `--jobs 2`).

    python scripts/stored_sweep.py
"""

from __future__ import annotations

import sys
import time
import tomllib

from helpers.runlog import RUNS_DIR
from scripts.measurement_files import measurement_start, write_measurement
from sweeps import runner
from sweeps.compare import comparison_table, held_out_sets
from sweeps.notebook_runs import ROOT
from sweeps.runs import read_run
from sweeps.stored import stored_run, stored_runs

GRID = ROOT / "sweeps" / "stored.toml"


def main(argv: list[str]) -> int:
    started = measurement_start()
    clock = time.monotonic()
    arguments = ["--grid", str(GRID.relative_to(ROOT)), *argv]
    code = runner.main(arguments)
    if code:
        return code
    grid, name = runner.grid_from(runner.parse_args(arguments))
    runs = [read_run(RUNS_DIR / planned.name) for planned in runner.plan(grid, name)]
    values = {
        "grid": str(GRID.relative_to(ROOT)),
        "profile": tomllib.loads(GRID.read_text())["profile"],
        "minutes": round((time.monotonic() - clock) / 60, 1),
        "runs": [stored_run(run) for run in runs],
    }
    path = write_measurement("stored_sweep", started, values)
    stored = stored_runs({**started, **values})
    table = comparison_table(stored)
    columns = [c for name in held_out_sets(stored) for c in (f"{name} gain", f"{name} ±")]
    print(table[columns].round(3).to_string())
    print(f"stored in {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
