"""Notebook 03's "Try this" that compares `importance_sampling` with `ppo` on stale samples,
run as the bullet says: `learning_rate = 1e-3`, and the bullet's own cell (taken from the
notebook's text, not retyped here) added after the scatter plot. The run also executes the
optional section that recomputes `ppo` and `cispo` by hand (it asserts inside)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "03_one_grpo_step.ipynb"
SETTINGS = {"learning_rate": 1e-3}  # what the bullet says to set


def bullet_cell(nb: nbformat.NotebookNode) -> tuple[str, dict]:
    """The bullet's code block, as printed in the notebook's last cell (the one that compares
    the two losses), and the settings its sentence asks for, read from its backticks."""
    bullets = nb.cells[-1].source.split("\n- ")
    [bullet] = [b for b in bullets if '("importance_sampling", "ppo")' in b]
    block = re.search(r"```python\n(.*?)\n\s*```", bullet, re.S).group(1)
    settings = dict(re.findall(r"`(\w+) = ([^`]+)`", bullet.split("```", 1)[0]))
    code = "\n".join(line.removeprefix("  ") for line in block.splitlines())
    return code, {name: float(value) for name, value in settings.items()}


def test_ppo_and_importance_sampling_differ_on_stale_samples(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    folder, env = tmp_path, shared_stack_env
    nb = nbformat.read(NOTEBOOK, as_version=4)
    [scatter] = [
        i for i, c in enumerate(nb.cells) if "weights_after = completion_weights" in c.source
    ]
    code, settings = bullet_cell(nb)
    assert settings == SETTINGS  # the test runs at what the bullet states
    nb.cells.insert(scatter + 1, nbformat.v4.new_code_cell(code))
    edited = folder / "edited-03.ipynb"
    nbformat.write(nb, edited)
    args = [sys.executable, "-m", "papermill", str(edited), str(folder / "out.ipynb")]
    args += ["--cwd", str(NOTEBOOK.parent), "--kernel", "python3", "--no-progress-bar"]
    for name, value in SETTINGS.items():
        args += ["-p", name, str(value)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    executed = nbformat.read(folder / "out.ipynb", as_version=4)
    [added] = [c for c in executed.cells if c.source == code]  # papermill adds a cell
    printed = "".join(o.get("text", "") for o in added.outputs)
    losses = dict(re.findall(r"^(\w+)\s+loss:sum ([-+]\d+\.\d+)$", printed, re.M))
    outside = float(re.search(r"outside \[0.8, 1.2\]: ([\d.]+)%", printed).group(1))
    # What the bullet announces: some weights left the clip range, and ppo's loss is the
    # higher one (per token it keeps the smaller objective, so it can only be higher).
    assert outside > 0, printed
    assert float(losses["ppo"]) > float(losses["importance_sampling"]) + 0.01, printed
    # The optional section ran and printed both of its checks.
    hand = "".join(
        o.get("text", "")
        for c in executed.cells
        if "spread_D" in c.source
        for o in c.get("outputs", [])
    )
    assert "ppo    by hand" in hand and "cispo  by hand" in hand
