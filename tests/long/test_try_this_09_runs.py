"""Notebook 09's "Try this" bullets that ship an adapter, each at the settings it states:

- `keep_on_sail = True` at the default `run_name`, then what that bullet and the rank-64 one
  say to type (the code spans of their text, run in order, not retyped here), after the
  clean-up cell, as the rank-64 bullet allows with `keep_on_sail = True`;
- notebook 04 with `run_name = "longer"` and `steps = 150`, then this notebook with
  `run_name = "longer"`.

Sizes a bullet does not state are the smallest the notebooks allow: no default `arithmetic`
run exists here, so the notebook trains its short run of `short_run_steps = 1`; notebook 04's
150 steps keep its default sizes and skip the optional reward-hacking section.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from local_stack.client.supervisor import stop_local_stack
from tests.notebook_support import (
    PROBE,
    error_outputs,
    finish,
    kernel_env,
    papermill,
    printed,
    probe,
    run,
    succeeded,
)
from tests.try_this_support import NOTEBOOKS, try_this_bullets

NOTEBOOK = "09_ship_the_adapter.ipynb"
KEEP = "Set `keep_on_sail = True`"
RANK_64 = "a config that claims rank 64"
# The bullet's two settings; the rest are notebook 04's defaults (at 60 steps or more it holds
# its run to a held-out format gain, which smaller groups or evaluations need not show).
LONGER_04 = {"steps": 150, "run_name": "longer"}


def parameter_names() -> set[str]:
    [cell] = [
        c
        for c in nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4).cells
        if "parameters" in c.metadata.get("tags", [])
    ]
    return {t.id for node in ast.parse(cell.source).body for t in node.targets}


def typed_statements(phrase: str) -> list[str]:
    """The code spans of the bullet named by `phrase` that are statements to type, in order:
    not a bare name or a parameter setting; "the same with `x`" repeats the statement before
    with its file id replaced by `x`."""
    [bullet] = [b for b in try_this_bullets(NOTEBOOKS / NOTEBOOK) if phrase in b]
    statements = []
    for span in re.finditer(r"`([^`]+)`", bullet):
        try:
            [node] = ast.parse(span.group(1)).body
        except SyntaxError:
            continue
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Name):
            if bullet[: span.start()].rstrip().endswith("the same with"):
                statements.append(re.sub(r"\w+_id(?=\})", span.group(1), statements[-1]))
            continue
        if isinstance(node, ast.Assign) and {t.id for t in node.targets} <= parameter_names():
            continue
        statements.append(span.group(1))
    return statements


def probe_cell(statements: list[str]) -> str:
    """Each statement in turn; an expression's value kept, an exception recorded (the rank-64
    bullet expects one) and the next statement run; then what is left on Sail."""
    lines = ["import json", "seen, raised = {}, {}"]
    for i, statement in enumerate(statements):
        [node] = ast.parse(statement).body
        body = f"seen[{i}] = {statement}" if isinstance(node, ast.Expr) else statement
        lines += ["try:", textwrap.indent(body, "    "), "except Exception as error:"]
        lines += [f"    raised[{i}] = f'{{type(error).__name__}}: {{error}}'"]
    lines += [
        'left = (await sail_request("GET", "/v1/loras"))["data"]',
        'left += (await sail_request("GET", "/v1/files"))["data"]',
        f"print({PROBE!r} + json.dumps("
        '{"seen": seen, "raised": raised, "left": left, '
        '"kept": [lora_name, config_file_id, weights_file_id]}, default=str))',
    ]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("try-this-08")
    yield folder
    stop_local_stack(folder / "stack")  # the stack the kernels started outlives them


@pytest.fixture(scope="module")
def kept(folder: Path) -> tuple[list[str], nbformat.NotebookNode, dict]:
    statements = typed_statements(RANK_64) + typed_statements(KEEP)
    nb = nbformat.read(NOTEBOOKS / NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(probe_cell(statements)))
    notebook = folder / "keep-on-sail.ipynb"
    nbformat.write(nb, notebook)
    parameters = {"keep_on_sail": True, "short_run_steps": 1}
    executed = succeeded(run(notebook, folder / "kept.ipynb", parameters, kernel_env(folder)))
    assert not error_outputs(executed)
    return statements, executed, probe(executed)


def test_keep_on_sail_lists_the_lora_and_its_files_until_deleted(kept) -> None:
    """The guide's answer: GET /v1/loras lists this run's name, GET /v1/files its two files,
    the clean-up cell says "kept on Sail"; the deletes the bullet lists leave nothing."""
    statements, executed, seen = kept
    lora_name, config_id, weights_id = seen["kept"]
    assert "no usable run 'arithmetic'" in printed(executed, "state_path = RUNS_DIR")
    kept_line = printed(executed, "if cfg.keep_on_sail:")
    assert f"kept on Sail: LoRA {lora_name!r}, files {config_id} and {weights_id}" in kept_line
    listed = {statements[int(i)]: value for i, value in seen["seen"].items()}
    loras = listed['await sail_request("GET", "/v1/loras")']["data"]
    files = listed['await sail_request("GET", "/v1/files")']["data"]
    assert lora_name in [lora["name"] for lora in loras]
    assert {config_id, weights_id} <= {file["id"] for file in files}
    assert seen["left"] == []


def test_a_rank_64_config_fails_validation_with_sails_reason(kept) -> None:
    """The guide's answer: upload and create succeed, validation fails, and
    `wait_for_validation` raises `LoraNotUsable` with Sail's reason, `invalid_rank`."""
    statements, _, seen = kept
    raised = {statements[int(i)]: error for i, error in seen["raised"].items()}
    [(statement, error)] = raised.items()  # only the validation wait raised
    assert statement.startswith("await wait_for_validation(")
    assert error.startswith("LoraNotUsable: ") and "invalid_rank: " in error
    assert "rank [64]; ranks must be integers from 1 to 32" in error


def test_a_150_step_run_is_shipped_and_compared(folder: Path) -> None:
    """The guide's answer: the longer run's adapter, after its 150 steps, is the one shipped
    and compared, and its gain over the base model is stated with its paired interval (whether
    that interval clears 0 is a random outcome: tests/long/test_notebook_09_claims.py checks
    it at the defaults). Notebook 04 asserts its own claims inside."""
    env = kernel_env(folder)
    # 150 steps at the default sizes, then the held-out evaluations: beyond `run`'s timeout.
    code, log = finish(
        papermill("04_training_loop.ipynb", folder / "04.ipynb", LONGER_04, env), 2400
    )
    assert code == 0, log[-3000:]
    state = json.loads((folder / "runs" / "longer" / "state.json").read_text())
    assert state["completed_steps"] == 150
    executed = succeeded(run(NOTEBOOK, folder / "08-longer.ipynb", {"run_name": "longer"}, env))
    assert not error_outputs(executed)
    shipped = printed(executed, "state_path = RUNS_DIR")
    assert f"shipping the adapter of run 'longer' after 150 steps ({state['checkpoint']})" in (
        shipped
    )
    assert "training" not in shipped  # nothing trained here: the run's adapter is used
    [sentence] = [
        o["data"]["text/markdown"]
        for c in executed.cells
        if c.get("id") == "before-after-rendered"
        for o in c.outputs
        if "text/markdown" in o.get("data", {})
    ]
    assert "(150 steps of training)" in sentence and "95% interval [" in sentence
