"""Notebook cells that need a sandbox, skipped in one line where none can be created.

The local sandbox needs Linux with bubblewrap and unprivileged user namespaces; where it
cannot run, it refuses to start rather than run a command unisolated. A notebook then
still runs every cell that does not create a sandbox: a cell whose first line is
`# @needs_sandbox` prints one line instead of running. The code of each cell stays the
same for both backends; only whether it runs depends on this machine.
"""

from __future__ import annotations

from shell_tasks.sandboxes import sandbox_problem

MARK = "# @needs_sandbox"
SKIPPED = "skipped: this cell needs a sandbox, which this machine cannot create (see the top)"

_problem: str | None = None  # why marked cells are skipped; None runs them


def _skip_marked_cell(lines: list[str]) -> list[str]:
    """An IPython input transformer: a marked cell becomes a print while sandboxes are out."""
    code = [line for line in lines if line.strip()]
    if _problem is None or not code or code[0].strip() != MARK:
        return lines
    return [f"print({SKIPPED!r})\n"]


def prepare_sandbox_cells(backend: str) -> None:
    """Check that `backend`'s sandboxes can be created here.

    If they cannot, say so in one sentence, and from now on cells marked `# @needs_sandbox`
    print one line instead of running (in an IPython kernel; elsewhere nothing is skipped,
    and creating a sandbox fails with the local sandbox's own refusal).
    """
    global _problem
    _problem = sandbox_problem(backend)
    if _problem is not None:
        print(
            f"The local sandbox cannot run on this machine, because {_problem}; the cells "
            "that create sandboxes print one line and run nothing, and with "
            'backend = "cloud" they run on Sailboxes from shell_tasks.sandboxes.sailbox_factory.'
        )
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and _skip_marked_cell not in shell.input_transformers_cleanup:
        shell.input_transformers_cleanup.append(_skip_marked_cell)
