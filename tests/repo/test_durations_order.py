"""The recorded durations that order the suite's units (tests/durations.json, written by
scripts/test_durations.py) are read from junit XML by file, and name files that exist."""

from __future__ import annotations

import json
from pathlib import Path

from scripts.test_durations import DURATIONS_PATH, ROOT, unit_seconds

JUNIT = """<testsuites><testsuite>
<testcase classname="tests.stack.test_sandbox" name="a" time="1.5"/>
<testcase classname="tests.stack.test_sandbox" name="b" time="2.0"/>
<testcase classname="notebooks.04_training_loop.ipynb" name="Cell 0" time="4.0"/>
<testcase classname="tests.stack.test_gone_long_ago" name="c" time="9.0"/>
</testsuite></testsuites>"""


def test_seconds_are_summed_per_file_and_notebook(tmp_path: Path) -> None:
    junit = tmp_path / "junit.xml"
    junit.write_text(JUNIT)
    assert unit_seconds([junit]) == {
        "tests/stack/test_sandbox.py": 3.5,
        "notebooks/04_training_loop.ipynb": 4.0,
    }


def test_every_recorded_unit_is_a_file_of_the_suite() -> None:
    recorded = json.loads(DURATIONS_PATH.read_text())
    assert {"written", "commit", "command"} <= set(recorded)
    assert [unit for unit in recorded["seconds"] if not (ROOT / unit).exists()] == []
