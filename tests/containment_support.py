"""Notebook 08's containment table, built from given rows (one row per attempt, each column at
a harmless default unless the row says otherwise), and the check of what the notebook says of
it, which the tests run on such tables and on the executed notebook's own."""

from __future__ import annotations

from typing import Any

import pandas as pd

# The table's columns, at what an attempt that did nothing notable shows.
COLUMNS = {
    "exit code": 0,
    "timed out": False,
    "returned after (s)": 0.5,
    "stdout bytes": 0,
    "stdout (head)": "",
    "stderr (telling line)": "",
    "afterwards": "",
}


def containment_table(rows: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The table, indexed by attempt, from {attempt: the columns that differ from COLUMNS}."""
    return pd.DataFrame(
        [{"attempt": name, **COLUMNS, **row} for name, row in rows.items()]
    ).set_index("attempt")


def assert_contained(
    outcome: dict[str, dict[str, Any]],
    backend: str,
    left: int,
    totals_enforced: bool = False,
    memory_peak_bytes: int | None = None,
    limits: Any = None,
) -> None:
    """What notebook 08 says of its containment table (`outcome`, by attempt), checked: the
    claims that hold on any machine, however busy. Not checked: how soon a timed-out command
    returned (wall-clock time), or whether the fork bomb reached the process limit before its
    timeout (a busy machine may not fork that fast)."""
    for name in ("infinite loop", "fork bomb"):  # sail.ExecResult's timeout: 124 and timed_out
        assert (outcome[name]["exit code"], outcome[name]["timed out"]) == (124, True), name
    assert outcome["1 GB of output"]["stdout bytes"] == 1000
    assert "connected" not in outcome["network call"]["stdout (head)"]
    assert outcome["read your secrets"]["stdout (head)"].startswith("canary: 0,")
    assert outcome["fake the grade"]["afterwards"] == "graded reward 0.0"
    assert outcome["fake it from ~/.profile"]["afterwards"] == "graded reward 0.0"
    assert left == 0
    # Local only: these rows measure the local sandbox's own limits, namespaces and kill. A
    # Sailbox has its size's limits, no network at all, real root and processes that outlive
    # their command.
    if backend != "local":
        return
    if totals_enforced:  # without root the limits hold per process, and these rows fit in them
        disk = outcome["disk: 8 x 100 MiB in 1 MiB files"]
        assert "No space left" in disk["stderr (telling line)"]
        assert int(disk["stdout (head)"]) <= limits.disk_bytes >> 20
        assert memory_peak_bytes is not None and memory_peak_bytes <= limits.memory_bytes
    assert "refused" in outcome["network call"]["stderr (telling line)"]
    assert "Read-only" in outcome["write outside the workdir"]["stderr (telling line)"]
    assert outcome["background process"]["stdout (head)"].startswith("started ")
    assert outcome["the same, graded in its own sandbox"]["afterwards"] == "graded reward 1.0"
    assert outcome["background process"]["afterwards"].startswith("0 ")
    assert outcome["read your secrets"]["stdout (head)"] == "canary: 0, key names: 0"
