"""Measurements that scripts made across seeds, stored in measurements/ with where they came
from (`scripts/measurement_files.py` writes them), so that a notebook renders a range from
the file its script wrote and never from numbers pasted into a cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MEASUREMENTS_DIR = Path(__file__).resolve().parent.parent / "measurements"


def load_measurement(name: str, missing_ok: bool = False) -> dict[str, Any] | None:
    """measurements/<name>.json; None if it is not there and `missing_ok`."""
    path = MEASUREMENTS_DIR / f"{name}.json"
    if missing_ok and not path.exists():
        return None
    return json.loads(path.read_text())


def provenance(measurement: dict[str, Any]) -> str:
    """Where a measurement came from, as a clause: command, date and commit."""
    commit = measurement["commit"][:10]
    return f"`{measurement['command']}` on {measurement['date']} (commit {commit})"
