"""Measurements made across seeds live in measurements/, written by their scripts with the
command, date and commit; notebooks render them from there and paste no measured numbers."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers.measurements import MEASUREMENTS_DIR
from tests.notebook_source import NOTEBOOK_NAMES, ROOT, cells

FILES = sorted(MEASUREMENTS_DIR.glob("*.json"))
# A run of five or more decimal literals in one cell, each with two or more decimals, is a
# pasted table of measured numbers.
PASTED_NUMBERS = re.compile(r"(?:[-+]?\d+\.\d{2,}\D{1,12}){5,}")


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_each_measurement_names_its_script_date_and_commit(path: Path) -> None:
    measurement = json.loads(path.read_text())
    assert (ROOT / measurement["script"]).is_file()
    assert measurement["command"].startswith(f"python {measurement['script']}")
    assert re.fullmatch(r"20\d\d-\d\d-\d\d", measurement["date"])
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?", measurement["commit"])
    script = (ROOT / measurement["script"]).read_text()
    assert re.search(rf"[\"']{path.stem}[\"']", script)  # the script writes this file
    loads = re.compile(rf'load_measurement\("{path.stem}"[,)]')
    users = [name for name in NOTEBOOK_NAMES if any(loads.search(c.source) for c in cells(name))]
    assert users, f"no notebook renders {path.name}"


def test_the_notebooks_and_their_measurements() -> None:
    assert {p.stem for p in FILES} >= {"held_out_gains", "shell_policy_seeds"}


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_no_cell_pastes_a_table_of_measured_numbers(name: str) -> None:
    for cell in cells(name):
        if cell.cell_type == "code":
            assert not PASTED_NUMBERS.search(cell.source), (name, cell.get("id"))
