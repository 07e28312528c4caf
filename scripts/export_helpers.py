"""Write the modules the notebooks teach from their `# @save` cells: `make helpers`.

As in d2l and nbdev, a notebook is the one source of the code it teaches. Each module in
MODULES is its notebook's `# @save` cells in order (the first of them holds the module's
imports), then those of the notebooks that continue it (`also`, as d2l's chapters add to one
module), under a header naming the notebook to edit and a docstring kept here. The text
goes through `ruff format` and must pass `ruff check`, so the module is as clean as
hand-written code. `tests/repo/test_single_source.py` fails when a committed module differs
from what this script writes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat

from exercises.cells import SAVE_MARK, solved

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS_DIR = ROOT / "notebooks"
HELPERS_DIR = ROOT / "helpers"


@dataclass(frozen=True)
class TaughtModule:
    """A module of `helpers/` that its notebooks' `# @save` cells define in full."""

    notebook: str  # file name in notebooks/
    module: str  # file name in helpers/
    docstring: str
    also: tuple[str, ...] = ()  # notebooks whose `# @save` cells follow, in order

    @property
    def notebooks(self) -> tuple[str, ...]:
        return (self.notebook, *self.also)


MODULES = (
    TaughtModule(
        "01_scoring.ipynb",
        "scoring.py",
        "Scoring a completion: the boxed-answer reward, the math environment, its group builder.",
    ),
    TaughtModule(
        "02_snapshot_and_serve.ipynb",
        "serving.py",
        """Snapshot the LoRA weights Tinker is training and serve them through Sail.

Notebook 04 calls `sail_policy` at the start of every training step.
""",
    ),
    TaughtModule(
        "03_one_grpo_step.ipynb",
        "inspect_step.py",
        """One GRPO step, opened up: the numbers `train_step` computes but never shows, and
when the sign of a mean change among them counts as measured.
""",
    ),
    TaughtModule(
        "04_training_loop.ipynb",
        "training.py",
        """One GRPO step: snapshot, roll out on Sail, score, advantages, one Tinker optimizer step.

Also the counter that stops a run whose rollouts all failed, the held-out evaluation that
notebook 05 runs on the base and the trained weights, its summary figure, and its pass@k
curves and their figure.
""",
        also=("05_did_it_learn.ipynb",),
    ),
    TaughtModule(
        "07_faster_loops.ipynb",
        "pipelined.py",
        """The training loop with sampling overlapped: batches sampled up to k steps ahead.

`run_loop` is notebook 04's loop when k = 0; with k > 0, Sail samples up to k batches while
Tinker trains. A `Timeline` records when each part ran, and `timeline_figure` draws it;
`bench/pipelining.py` uses the loop and the timeline.
""",
    ),
    TaughtModule(
        "09_ship_the_adapter.ipynb",
        "shipping.py",
        """Shipping an adapter's plumbing: the short run shipped when notebook 04 left none, the
export's size and the room it needs, the base model the converter reads, the archive fetched
and unpacked safely, given tokens scored with Tinker's `forward` (its logprobs, their gaps
to Sail's, and whether those can tell the adapter from the base model), and the raw HTTP
requests that make the PEFT files a named LoRA on Sail.

The `sail` SDK has no call for uploading a LoRA, so these requests go to the endpoint, with
the key, that the SDK's own `sail.Config.from_env()` finds. `REQUEST_SHAPES` lists every
request shape the course sends, each route and JSON body field documented (with its source) or
guessed; `tests/repo/test_sdk_drift.py` fails when the course sends one that is not in it. The
local stack accepts these shapes, so only the real Sail can prove a guess wrong, and what its
error then says is not documented.
""",
    ),
)


def saved_cells(notebook: Path) -> list[str]:
    """The code of every cell whose first line is `# @save`, without that line; an exercise's
    stub gives its solution (exercises/cells.py), so the module holds the course's code."""
    cells = solved(nbformat.read(notebook, as_version=4)).cells
    return [
        cell.source.partition("\n")[2].strip()
        for cell in cells
        if cell.cell_type == "code" and cell.source.partition("\n")[0].strip() == SAVE_MARK
    ]


def module_text(taught: TaughtModule, notebooks_dir: Path = NOTEBOOKS_DIR) -> str:
    """The module's full text: header, docstring, then the saved cells, formatted and linted."""
    cells = []
    for notebook in taught.notebooks:
        if not (saved := saved_cells(notebooks_dir / notebook)):
            raise SystemExit(f"notebooks/{notebook} has no `{SAVE_MARK}` cells")
        cells += saved
    continued = "".join(f" and\n# notebooks/{notebook}" for notebook in taught.also)
    header = (
        f"# Generated from notebooks/{taught.notebook}{continued} by `make helpers`. Do not "
        f"edit: change\n# the `{SAVE_MARK}` cells there, then run `make helpers` again.\n"
    )
    text = header + f'"""{taught.docstring}"""\n\n' + "\n\n".join(cells) + "\n"
    # Config (line length, first-party packages) comes from the pyproject that governs
    # the committed module, wherever the text is written.
    committed_path = HELPERS_DIR / taught.module
    text = _ruff(["format", "--stdin-filename", str(committed_path), "-"], text)
    _ruff(["check", "--no-fix", "--stdin-filename", str(committed_path), "-"], text)
    return text


def _ruff(args: list[str], text: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *args],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"ruff {args[0]} rejects the generated module:\n{result.stdout}")
    return result.stdout


def export(notebooks_dir: Path = NOTEBOOKS_DIR, out_dir: Path = HELPERS_DIR) -> list[Path]:
    """Write every module in MODULES to `out_dir`; return the files whose content changed."""
    changed = []
    for taught in MODULES:
        text = module_text(taught, notebooks_dir)
        path = out_dir / taught.module
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path)
    return changed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=HELPERS_DIR)
    args = parser.parse_args()
    changed = export(out_dir=args.out_dir)
    for taught in MODULES:
        path = args.out_dir / taught.module
        shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        state = "written" if path in changed else "unchanged"
        print(f"{shown}: {state} (from notebooks/{', '.join(taught.notebooks)})")


if __name__ == "__main__":
    main()
