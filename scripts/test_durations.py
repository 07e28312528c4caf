"""Write tests/durations.json, the seconds each scheduling unit of the suite took, from a
junit XML (`pytest --junitxml=FILE`): `python scripts/test_durations.py FILE ...`.

The root conftest.py hands pytest-xdist the longest units first, so that no long file starts
last and runs alone at the end (by default xdist orders them by their number of tests, which
put a few slow stack tests last). Only the order depends on these numbers: a stale or missing
entry makes a run slower, never wrong. Run it again after a `make test` and a
`make test-notebooks` written with --junitxml when the order drifts far from the times.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import xml.etree.ElementTree as ET
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS_PATH = ROOT / "tests" / "durations.json"
SHORTEST_KEPT_SECONDS = 2.0  # shorter units are in no danger of making the tail


def unit_seconds(junit_paths: list[Path]) -> Counter[str]:
    """Seconds per test file or notebook, summed over its tests (junit names a test's file by
    its dotted path: `tests.stack.test_sandbox`, `notebooks.04_training_loop.ipynb`)."""
    seconds: Counter[str] = Counter()
    for junit_path in junit_paths:
        for case in ET.parse(junit_path).iter("testcase"):
            dotted = case.get("classname", "")
            stem, suffix = (
                (dotted[: -len(".ipynb")], ".ipynb")
                if dotted.endswith(".ipynb")
                else (dotted, ".py")
            )
            path = stem.replace(".", "/") + suffix
            if (ROOT / path).exists():
                seconds[path] += float(case.get("time", 0.0))
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", nargs="+", type=Path)
    args = parser.parse_args()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    seconds = unit_seconds(args.junit)
    DURATIONS_PATH.write_text(
        json.dumps(
            {
                "written": datetime.now(UTC).strftime("%Y-%m-%d"),
                "commit": commit,
                "command": "python scripts/test_durations.py " + " ".join(map(str, args.junit)),
                "seconds": {
                    path: round(total, 1)
                    for path, total in seconds.most_common()
                    if total >= SHORTEST_KEPT_SECONDS
                },
            },
            indent=1,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
