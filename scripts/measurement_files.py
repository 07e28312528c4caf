"""How a script stores a measurement in measurements/, with where it came from, for a
notebook to render (`helpers.measurements.load_measurement`)."""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.measurements import MEASUREMENTS_DIR


def measurement_start() -> dict[str, Any]:
    """Where a measurement comes from, taken when its script starts (the code it runs): the
    command, the date, the commit (marked `-dirty` if the checkout had changes) and the load
    average."""
    root = MEASUREMENTS_DIR.parent
    commit = _git(root, "rev-parse", "HEAD")
    if _git(root, "status", "--porcelain", "--untracked-files=no"):
        commit += "-dirty"
    script = Path(sys.argv[0]).resolve()
    return {
        "script": str(script.relative_to(root)) if script.is_relative_to(root) else script.name,
        "command": " ".join(["python", *sys.argv]),
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "load_average": [round(load, 1) for load in os.getloadavg()],
    }


def write_measurement(name: str, started: dict[str, Any], values: dict[str, Any]) -> Path:
    """Store `values` as measurements/<name>.json, after `started` (`measurement_start()`)."""
    path = MEASUREMENTS_DIR / f"{name}.json"
    text = json.dumps({**started, **values}, indent=1)
    # A list of numbers on one line: a run's counts per problem would take a line each.
    path.write_text(re.sub(r"\[[-+.\deE,\s]*\]", _one_line, text) + "\n")
    return path


def _one_line(numbers: re.Match) -> str:
    return "[" + " ".join(numbers.group()[1:-1].split()) + "]"


def _git(root: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return result.stdout.strip()
