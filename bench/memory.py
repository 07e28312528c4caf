"""The course's memory with every notebook open, and how fast a notebook connects:
`python -m bench.memory`.

Runs each notebook with its default parameters in its own kernel, one after another, and
keeps all four kernels alive, as four open notebooks in JupyterLab would. Then it counts the
local stack processes (one is expected) and measures resident memory of the stack and of
each kernel: RSS, and PSS, which charges pages shared between processes (the Python and
torch libraries) once in total, so the PSS sum is what the machine really holds.

It also times a notebook's start (`connect("local")`, in three parts) in a fresh kernel:
once before any stack runs (the kernel starts one) and once on the running stack.
Everything runs in a temporary storage dir, and is stopped at the end.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from pathlib import Path

import nbformat
import psutil
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from local_stack import config
from local_stack.client.supervisor import server_processes, stop_local_stack

REPO_ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("[0-9][0-9]*_*.ipynb"))
MB = 1024**2
# A notebook's start, in three parts: importing the SDKs (tinker brings torch), finding or
# starting the local stack, and the rest of connect() (tokenizer, renderer, data).
CONNECT = (
    "import time\n"
    "started = time.perf_counter()\n"
    "import helpers.backend\n"
    "from local_stack.client.supervisor import start_local_stack\n"
    "imported = time.perf_counter()\n"
    "start_local_stack()\n"
    "stack = time.perf_counter()\n"
    "course = helpers.backend.connect('local')\n"
    "print(imported - started, stack - imported, time.perf_counter() - stack)\n"
)
PARTS = ("import SDKs", "find or start the stack", "rest of connect()")


async def execute_in_new_kernel(nb: nbformat.NotebookNode) -> AsyncKernelManager:
    """Execute `nb` in a new python3 kernel and return its manager; the kernel stays alive.
    The manager provisions CurveZMQ keys, so the kernel does not warn about plain TCP."""
    manager = AsyncKernelManager(kernel_name="python3", transport_encryption="auto")
    client = NotebookClient(
        nb, km=manager, timeout=None, resources={"metadata": {"path": str(REPO_ROOT / "notebooks")}}
    )
    await client.async_execute()
    return manager


async def time_connect() -> list[float]:
    """Seconds for each of PARTS, in a fresh kernel (shut down afterwards)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CONNECT)])
    manager = await execute_in_new_kernel(nb)
    await manager.shutdown_kernel(now=True)
    return [float(x) for x in nb.cells[0].outputs[0]["text"].split()]


def memory_mb(pid: int) -> tuple[float, float]:
    info = psutil.Process(pid).memory_full_info()
    return info.rss / MB, getattr(info, "pss", info.rss) / MB


async def run(storage: Path) -> None:
    cold = await time_connect()  # starts the stack, which the notebooks' kernels then share
    kernels = {}
    try:
        for notebook in NOTEBOOKS:
            nb = nbformat.read(notebook, as_version=4)
            kernels[notebook.stem] = await execute_in_new_kernel(nb)
        stacks = server_processes(**{config.STORAGE_DIR_VAR: str(storage)})
        print(f"local stack processes with {len(kernels)} notebooks' kernels alive: {len(stacks)}")
        rows = {"local stack": memory_mb(stacks[0].pid)} if len(stacks) == 1 else {}
        rows |= {name: memory_mb(km.provisioner.pid) for name, km in kernels.items()}
        for name, (rss, pss) in rows.items():
            print(f"  {name:28s} RSS {rss:6.0f} MB   PSS {pss:6.0f} MB")
        rss, pss = (sum(column) for column in zip(*rows.values(), strict=True))
        print(f"  {'total':28s} RSS {rss:6.0f} MB   PSS {pss:6.0f} MB")
        warm = await time_connect()
    finally:
        for manager in kernels.values():
            await manager.shutdown_kernel(now=True)
    for label, seconds in (("no stack running", cold), ("stack running", warm)):
        parts = ", ".join(f"{part} {s:.2f} s" for part, s in zip(PARTS, seconds, strict=True))
        print(f"notebook start, {label}: {sum(seconds):.2f} s ({parts})")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as scratch:
        storage = Path(scratch, "stack").resolve()
        os.environ[config.STORAGE_DIR_VAR] = str(storage)
        os.environ["COURSE_RUNS_DIR"] = str(Path(scratch, "runs"))
        os.environ["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        )
        try:
            asyncio.run(run(storage))
        finally:
            stop_local_stack(storage)


if __name__ == "__main__":
    main()
