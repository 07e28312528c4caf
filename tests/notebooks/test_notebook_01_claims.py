"""What notebook 01's text says of the hand-written completions on the problem the learner
picked (`example_index`, from the backend's data), checked on the executed notebook rather
than by an assert in it: those rows follow the chosen problem, so a learner who picks another
one must never meet an AssertionError over them. (The rows with problems of their own stay
checked in the notebook, in a check cell a learner can read.)"""

from __future__ import annotations

from io import StringIO
from pathlib import Path

import nbformat
import pandas as pd

from tests.notebook_support import run, small, succeeded

# (correct, well formed) of each row on the chosen problem, as the text below the table says.
ON_THE_CHOSEN_PROBLEM = {
    "correct": (1, 1),
    "wrong": (0, 1),
    "unboxed": (0, 0),
    "truncated, no stop token": (0, 0),
    "extra spaces": (1, 1),
    "two boxes, last one right": (1, 1),
    "two boxes, last one wrong": (0, 1),
    "box left open": (0, 0),
}


def shown_table(executed: nbformat.NotebookNode, cell_id: str) -> pd.DataFrame:
    """The table the cell `cell_id` displayed, read back from its HTML."""
    [cell] = [c for c in executed.cells if c.get("id") == cell_id]
    [html] = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    return pd.read_html(StringIO(html), index_col=0)[0]


def test_the_rows_on_the_chosen_problem_score_as_the_text_says(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    parameters = small("01_scoring")  # the default problem
    executed = succeeded(
        run("01_scoring.ipynb", tmp_path / "out.ipynb", parameters, shared_stack_env)
    )
    table = shown_table(executed, "cell-25").set_index("case")
    seen = {
        case: (table.at[case, "correct"], table.at[case, "format"])
        for case in ON_THE_CHOSEN_PROBLEM
    }
    assert seen == ON_THE_CHOSEN_PROBLEM
    # Whose grader ran: both checks print the line that says it.
    shown = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "`graded_text` is not written yet" in shown
    assert "`normalize_answer` is not written yet" in shown
