"""Notebook 08's containment check holds on a local machine where the sandbox totals do not.

Without root the local sandbox cannot enforce its per-sandbox totals (memory, disk): the limits
hold per process, `memory_peak_bytes()` is None, and the memory and disk rows finish without
"Killed" or "No space left". The check (`tests.containment_support.assert_contained`, which
tests/notebooks/test_notebook_08_platforms.py runs on the executed notebook) must then skip
those rows rather than crash, and still check them where the totals are enforced.
"""

from __future__ import annotations

import pytest

from local_stack.client.sailbox.isolation import ResourceLimits
from tests.containment_support import assert_contained, containment_table

# What the local sandbox's table shows when the notebook does not run as root: every row as
# with root, except that the eight allocations and the 800 MiB of small files all succeed.
PER_PROCESS_ROWS = {
    "infinite loop": {"exit code": 124, "timed out": True, "returned after (s)": 2.0},
    "fork bomb": {
        "exit code": 124,
        "timed out": True,
        "returned after (s)": 3.0,
        "stderr (telling line)": "bash: fork: retry: Resource temporarily unavailable",
    },
    "1 GB of output": {"stdout bytes": 1000, "stdout (head)": "xxxx"},
    "memory: 8 x 200 MiB": {"stderr (telling line)": ""},
    "disk: 8 x 100 MiB in 1 MiB files": {"stdout (head)": "801"},
    "network call": {"stderr (telling line)": "ConnectionRefusedError: Connection refused"},
    "write outside the workdir": {
        "stderr (telling line)": "bash: /tmp/escaped.txt: Read-only file system"
    },
    "background process": {
        "stdout (head)": "started 3",
        "afterwards": "0 'sleep 300' running in its next command",
    },
    "read your secrets": {"stdout (head)": "canary: 0, key names: 0"},
    "fake the grade": {"stdout (head)": "planted", "afterwards": "graded reward 0.0"},
    "fake it from ~/.profile": {"afterwards": "graded reward 0.0"},
    "the same, graded in its own sandbox": {"afterwards": "graded reward 1.0"},
}


def check(totals_enforced: bool) -> None:
    outcome = containment_table(PER_PROCESS_ROWS).to_dict("index")
    limits = ResourceLimits()
    # Without the totals `memory_peak_bytes()` returns None.
    assert_contained(outcome, "local", 0, totals_enforced, None, limits)


def test_the_check_passes_where_the_limits_hold_per_process() -> None:
    check(totals_enforced=False)


def test_the_check_still_checks_the_totals_where_they_are_enforced() -> None:
    with pytest.raises(AssertionError):  # the disk row shows no "No space left"
        check(totals_enforced=True)
