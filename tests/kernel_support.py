"""A real IPython kernel for tests of what a notebook user sees when a cell stops."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parent.parent


def started_kernel(cwd: Path = ROOT, env: dict[str, str] | None = None) -> Iterator:
    """Yield (manager, client) of a kernel started in `cwd` (with `env`, if given) that has
    imported helpers, as notebooks do."""
    extra = {} if env is None else {"env": env}
    manager, client = start_new_kernel(kernel_name="python3", cwd=str(cwd), **extra)
    run(client, "import helpers")  # installs the one-line errors
    yield manager, client
    client.stop_channels()
    manager.shutdown_kernel(now=True)


def run(
    client, code: str, timeout: float = 60, on_message: Callable[[dict], None] | None = None
) -> tuple[dict, list[dict]]:
    """Execute `code`; return the reply's content and the error outputs it published.

    `on_message` also sees every message the cell published, as it arrives.
    """
    errors: list[dict] = []

    def keep(message: dict) -> None:
        if on_message is not None:
            on_message(message)
        if message["msg_type"] == "error":
            errors.append(message["content"])

    reply = client.execute_interactive(code, timeout=timeout, output_hook=keep)
    return reply["content"], errors


def loop_cell(blocking: bool, interactive: bool, steps: int = 5) -> str:
    """A training-loop-shaped cell: two quick steps, then steps that wait two minutes each.

    It prints "step 1" when the second step is done: the moment for a test to interrupt.
    """
    wait = "time.sleep" if blocking else "await asyncio.sleep"
    session = "os.environ['JPY_SESSION_NAME'] = 'test'" if interactive else ""
    return f"""import asyncio, os, time
os.environ.pop("JPY_SESSION_NAME", None)
{session}
from notebook_ui.progress import StepProgress
progress = StepProgress(total={steps}, desc="loop")
for step in range({steps}):
    {wait}(0.01 if step < 2 else 120)
    progress.step_done(f"step {{step}}")
progress.close()
"""


def bar_styles(seen: list[dict]) -> list[str]:
    """The styles a tqdm notebook bar was given, in the widget messages in `seen`."""
    states = [m["content"]["data"].get("state", {}) for m in seen if m["msg_type"] == "comm_msg"]
    return [state["bar_style"] for state in states if "bar_style" in state]
