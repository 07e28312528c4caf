"""How fast the course fails when it must: `python -m bench.fail_fast`.

The tests check *that* these fail in one clear sentence and *where*; this measures how soon:
(a) a parameter out of range, per notebook: papermill's own duration of the run that
    stops in the check cell (kernel start included, papermill's start-up not);
(b) a dead local stack: from SIGKILLing a stand-in for the stack's server to the kernel's
    running cell stopping with LocalStackStoppedError (the stack watcher's reaction time),
    for a cell that awaits and one that blocks.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parents[1]
# One out-of-range value per notebook (each is refused by its check cell).
BAD_PARAMETERS = {
    "01_scoring.ipynb": ("group_size", "0"),
    "02_snapshot_and_serve.ipynb": ("temperature", "5"),
    "04_training_loop.ipynb": ("steps", "0"),
    "08_sandboxed_rollouts.ipynb": ("group_size", "100"),
}
REPEATS = 3
CELLS = {"awaiting": "import asyncio\nawait asyncio.sleep(120)", "blocking": "time.sleep(120)"}


def bad_parameter_seconds(notebook: str, name: str, value: str, scratch: Path) -> float:
    out = scratch / notebook
    command = [sys.executable, "-m", "papermill", str(ROOT / "notebooks" / notebook), str(out)]
    command += ["--cwd", str(ROOT / "notebooks"), "--no-progress-bar", "-p", name, value]
    env = {**os.environ, "COURSE_RUNS_DIR": str(scratch / "runs")}
    env["COURSE_LOCAL_STACK_DIR"] = str(scratch / "stack")
    subprocess.run(command, env=env, capture_output=True, check=False)
    return nbformat.read(out, as_version=4).metadata.papermill.duration


def dead_stack_seconds(client, cell: str) -> float:
    """Seconds from killing the watched process to the running cell's end."""
    stand_in = subprocess.Popen(["sleep", "600"])
    log = Path("/nonexistent/stack.log")
    client.execute_interactive(
        f"import helpers\nfrom local_stack.client.watch import watch_local_stack\n"
        f"watch_local_stack({stand_in.pid}, __import__('pathlib').Path({str(log)!r}))",
        timeout=60,
    )
    killed_at: list[float] = []

    def kill() -> None:
        killed_at.append(time.perf_counter())
        stand_in.kill()

    threading.Timer(1.0, kill).start()
    client.execute_interactive(cell, timeout=180, output_hook=lambda message: None)
    stopped = time.perf_counter()
    stand_in.wait()
    return stopped - killed_at[0]


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-fail-fast-") as scratch:
        print("(a) a parameter out of range: seconds until the check cell fails (median)")
        for notebook, (name, value) in BAD_PARAMETERS.items():
            runs = [
                bad_parameter_seconds(notebook, name, value, Path(scratch)) for _ in range(REPEATS)
            ]
            print(f"    {notebook:30s} {name}={value:5s} {statistics.median(runs):.2f} s")

    manager, client = start_new_kernel(kernel_name="python3", cwd=str(ROOT))
    try:
        client.execute_interactive("import time\nimport helpers", timeout=60)
        print("(b) a dead stack: seconds from the kill to the running cell stopping (median)")
        for label, cell in CELLS.items():
            runs = [dead_stack_seconds(client, cell) for _ in range(REPEATS)]
            each = ", ".join(f"{r:.2f}" for r in runs)
            print(f"    {label:9s} cell {statistics.median(runs):.2f} s  (runs: {each})")
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


if __name__ == "__main__":
    main()
