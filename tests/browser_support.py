"""The notebooks as a learner sees them: JupyterLab in a real browser (Debian's Chromium,
driven by Playwright), Run All, then what is on the screen. Shared by
tests/notebooks/test_jupyterlab_browser.py and tests/long/test_jupyterlab_browser_rest.py.

Each notebook runs at its small sizes (a cell after the parameters cell sets them, as
papermill injects its parameters), on the session's local stack. On the rendered page:
- no dollar amount is typeset as maths (JupyterLab's MathJax reads `$...$` in Markdown and in
  HTML outputs): every amount a cell's Markdown or HTML holds is on the screen as written;
- no cell prints more than about 20 lines of text (a loop's steps belong in its progress bar
  and live plot, the full log in the run's files);
- no table cell is cut off (pandas' `...` for the rows or columns it left out, or a cell's
  text cut at its default 50 characters).

It needs /usr/bin/chromium (`.ci/run` installs Debian's); elsewhere it skips, unless
COURSE_REQUIRE_BROWSER=1 (set by CI) makes a missing browser a failure.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

from tests.notebook_support import NOTEBOOKS, kernel_env
from tests.sweep_support import write_fixture_runs

CHROMIUM = "/usr/bin/chromium"
# As the machine's notes say: no background traffic, which a closed network refuses.
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MAX_PRINTED_LINES = 20
PANDAS_CELL_WIDTH = 50  # pandas' default display.max_colwidth: a longer text ends in "..."
DOLLAR_AMOUNT = re.compile(r"(?<!\\)\$\d[\d,]*(?:\.\d+)?")
# Run All has finished when the kernel is idle and every code cell has run, or when a cell
# failed (JupyterLab then leaves the cells below it unrun).
ALL_CELLS_RAN = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    const kernel = panel.sessionContext.session?.kernel;
    if (kernel?.status !== 'idle') return false;
    const cells = panel.content.model.cells;
    let unrun = 0;
    for (let i = 0; i < cells.length; i++) {
        const cell = cells.get(i);
        if (cell.type !== 'code') continue;
        const outputs = cell.outputs.toJSON();
        if (outputs.some(output => output.output_type === 'error')) return true;
        if (cell.executionCount === null) unrun += 1;
    }
    return unrun === 0;
}"""
# The notebook asked for is the one in front, and its kernel is ready (JupyterLab may first
# restore what the workspace last showed).
KERNEL_READY = """path => {
    const panel = window.jupyterapp?.shell.currentWidget;
    return panel?.context?.path === path
        && panel.sessionContext?.session?.kernel?.status === 'idle';
}"""
# Each cell of the open notebook: its source, its outputs as stored, and what the page shows.
SCREEN = """() => window.jupyterapp.shell.currentWidget.content.widgets.map(cell => ({
    id: cell.model.id,
    type: cell.model.type,
    source: cell.model.sharedModel.getSource(),
    outputs: cell.model.type === 'code' ? cell.model.outputs.toJSON() : [],
    shown: cell.node.textContent,
    printed: Array.from(cell.node.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stdout"]'
    )).map(output => output.textContent).join(''),
    stderr: Array.from(cell.node.querySelectorAll(
        '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
    )).map(output => output.textContent).join(''),
    tableCells: Array.from(cell.node.querySelectorAll('.jp-OutputArea td, .jp-OutputArea th'))
        .map(tableCell => tableCell.textContent.trim()),
}))"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def require_chromium() -> None:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("COURSE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")


def write_parameterised_copies(folder: Path, runs: dict[str, dict]) -> None:
    """Each notebook of `runs` into `folder`, its parameters in a cell after the parameters
    cell, as papermill injects them."""
    for name, parameters in runs.items():
        book = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
        [index] = [
            i for i, c in enumerate(book.cells) if "parameters" in c.metadata.get("tags", [])
        ]
        values = "\n".join(f"{key} = {value!r}" for key, value in parameters.items())
        injected = nbformat.v4.new_code_cell(values)
        injected.metadata["tags"] = ["injected-parameters"]
        book.cells.insert(index + 1, injected)
        nbformat.write(book, folder / f"{name}.ipynb")


@contextmanager
def jupyterlab(folder: Path, runs: dict[str, dict], stack_dir: Path) -> Iterator[str]:
    """JupyterLab on `folder`, holding a parameterised copy of each notebook of `runs`, its
    kernels on the stack in `stack_dir`, and the runs of `folder/runs` with the fixture runs
    added; the URL of a notebook `{name}`, with the token."""
    require_chromium()
    write_parameterised_copies(folder, runs)
    # Every cell in the page at once (JupyterLab otherwise renders only what is in view).
    settings = folder / "settings" / "@jupyterlab" / "notebook-extension"
    settings.mkdir(parents=True)
    (settings / "tracker.jupyterlab-settings").write_text('{"windowingMode": "none"}')
    env = kernel_env(
        folder,
        COURSE_LOCAL_STACK_DIR=str(stack_dir),
        JUPYTERLAB_SETTINGS_DIR=str(folder / "settings"),
    )
    env["COURSE_RUNS_DIR"] = str(write_fixture_runs(folder / "runs"))
    port, token = _free_port(), secrets.token_hex(16)
    log = open(folder / "lab.log", "w")  # noqa: SIM115 (closed below)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={folder}",
         "--LabApp.expose_app_in_browser=True", "--ServerApp.allow_root=True"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (folder / "lab.log").read_text()[-2000:]
                time.sleep(0.5)
        # A workspace of its own per notebook, reset: only that notebook is open.
        yield f"http://127.0.0.1:{port}/lab/workspaces/{{name}}/tree/{{name}}.ipynb?reset&token={token}"
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
        shutil.rmtree(folder / "ipython", ignore_errors=True)


@contextmanager
def chromium() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


def run_all(browser, lab: str, name: str) -> list[dict]:
    """Open notebook `name` in JupyterLab, Run All, wait until it has finished; its cells as
    `SCREEN` reads them."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(lab.format(name=name))
        page.wait_for_function(KERNEL_READY, arg=f"{name}.ipynb", timeout=300_000, polling=500)
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.wait_for_function(ALL_CELLS_RAN, timeout=900_000, polling=1000)
        return page.evaluate(SCREEN)
    finally:
        page.close()


def cut_off(table_cell: str) -> bool:
    """Whether pandas cut this table cell: a row or column left out, or a text cut short."""
    return table_cell in ("...", "…") or (
        len(table_cell) == PANDAS_CELL_WIDTH and table_cell.endswith("...")
    )


def assert_clean_screen(name: str, cells: list[dict]) -> None:
    """`cells`, notebook `name` after Run All, ran without an error and show a clean screen.
    Prints one line on what it saw (`pytest -rP` shows it)."""
    assert len(cells) == len(nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4).cells) + 1
    errors = [o for c in cells for o in c["outputs"] if o.get("output_type") == "error"]
    assert not errors, (name, errors[0].get("ename"), errors[0].get("evalue"))
    for stream in ("printed", "stderr"):
        longest = max(cells, key=lambda cell: len(cell[stream].strip().splitlines()))
        lines = len(longest[stream].strip().splitlines())
        print(f"{name}: the longest {stream} output is {lines} lines (cell {longest['id']})")
    for cell in cells:
        # Markdown and HTML are typeset (code and plain text are not): the cell's source if
        # Markdown, and every Markdown or HTML output.
        written = [cell["source"] if cell["type"] == "markdown" else ""] + [
            "".join(output.get("data", {}).get(mime, ""))
            for output in cell["outputs"]
            for mime in ("text/markdown", "text/html")
        ]
        for amount in DOLLAR_AMOUNT.findall("\n".join(written)):
            assert amount in cell["shown"], f"{name}: {amount} was typeset as maths ({cell['id']})"
        lines = cell["printed"].strip().splitlines()
        assert len(lines) <= MAX_PRINTED_LINES, (name, cell["id"], len(lines), lines[:3])
        assert not [t for t in cell["tableCells"] if cut_off(t)], (name, cell["id"])
