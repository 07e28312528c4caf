"""A learner's own `graded_text` in notebook 01, right but written differently from the
course's, passes its check and is then the grader `MathEnv` uses in every cell below."""

from __future__ import annotations

from tests.try_this_support import run_cells

NOTEBOOK = "01_scoring.ipynb"
STUB = "    # YOUR CODE HERE (about 9 lines)\n    raise NotImplementedError"
# No parse_response: exactly one stop token, split at every </think>, and a trace of each call.
OWN = """    GRADED.append(len(action))
    stop = renderer.get_stop_sequences()
    ends = [i for i, token in enumerate(action) if token in stop]
    if len(ends) != 1:
        return None
    text = renderer.tokenizer.decode(action[: ends[0]])
    if "</think>" not in text:
        return None
    answer = text.split("</think>")[-1]
    return None if "<think>" in answer else answer"""


def test_a_passing_graded_text_is_what_math_env_grades_with(local_stack) -> None:
    needle = "def graded_text("
    cells = run_cells(
        NOTEBOOK,
        edits=[(needle, "# @save\n", "# @save\nGRADED: list = []\n\n"), (needle, STUB, OWN)],
    )
    assert "✓ `graded_text` passes" in cells.printed
    checked = len(cells.namespace["GRADED_TEXT"].cases(renderer=cells.namespace["course"].renderer))
    graded_in_cells = len(cells.namespace["GRADED"]) - checked
    # Every hand-written completion below was graded by the learner's function: the table's
    # rows, the second bug's three under the fixed grader, the group's members.
    table, second_bug = cells.namespace["table"], cells.namespace["second_bug"]
    assert graded_in_cells >= len(table) + len(second_bug)
    assert {row["case"]: row["correct"] for row in table}["1,2 vs 12"] == 0
