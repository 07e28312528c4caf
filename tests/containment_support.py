"""Notebook 07's containment table as its check cell reads it, built from given rows: one row
per attempt, each column at a harmless default unless the row says otherwise."""

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
