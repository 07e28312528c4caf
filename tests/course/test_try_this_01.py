"""Notebook 01's "Try this", each run on its own at the notebook's default parameters, in this
process: the notebook's own cells with the one edit the bullet describes
(`tests.try_this_support.run_cells`), checked against what docs/instructor.md's solution says.
Nothing in notebook 01 samples or trains, so no kernel is needed."""

from __future__ import annotations

import pytest

from tests.try_this_support import run_cells

NOTEBOOK = "01_scoring.ipynb"
BADLY_FORMED = ("unboxed", "truncated, no stop token", "box left open", "1,000 vs 1000, no stop")


def rewards(cells) -> dict[str, float]:
    return {row["case"]: row["reward"] for row in cells.namespace["table"]}


@pytest.fixture(scope="module")
def default(local_stack):
    return run_cells(NOTEBOOK)


def test_own_rows_score_as_the_guide_says(default) -> None:
    """The bullet's negative row, and rows that box `19.0` and an answer in words against a
    reference ending in 19: rewards 1, 1 and 0 (well formed, not equal)."""
    nineteen = '{"question": "What is 7 plus 12?", "answer": "7 + 12 = 19."}'
    rows = [
        '("negative", {"question": "What is 3 minus 5?", "answer": "3 - 5 = -2."}, '
        'f"</think>\\\\boxed{{-2}}{END}")',
        f'("19.0", {nineteen}, f"</think>\\\\boxed{{{{19.0}}}}{{END}}")',
        f'("in words", {nineteen}, f"</think>\\\\boxed{{{{nineteen}}}}{{END}}")',
    ]
    added = "".join(f"\n    {row}," for row in rows)
    cells = run_cells(NOTEBOOK, edits=[('END = "<|im_end|>"', "\n]\n", f"{added}\n]\n")])
    scored = {row["case"]: row for row in cells.namespace["table"]}
    assert scored["negative"]["completion"].endswith(r"\boxed{-2}<|im_end|>")
    assert scored["19.0"]["completion"].endswith(r"\boxed{19.0}<|im_end|>")
    assert (scored["negative"]["reward"], scored["negative"]["reference"]) == (1.0, "-2")
    assert (scored["19.0"]["reward"], scored["19.0"]["reference"]) == (1.0, "19")
    assert (scored["in words"]["correct"], scored["in words"]["format"]) == (0.0, 1.0)
    assert scored["in words"]["reward"] == 0.0
    # The rows the notebook wrote score as before.
    assert {case: rewards(cells)[case] for case in rewards(default)} == rewards(default)


def test_the_guides_reference_fools_final_answer_in_the_table(default) -> None:
    """The guide's answer: "He has 12 apples, 2 more than Sam." gives 2, not 12."""
    fooling = '("He has 12 apples, 2 more than Sam.", "12")'
    cells = run_cells(
        NOTEBOOK, edits=[("orca_style_answers = [", "\n]\n", f"\n    {fooling},\n]\n")]
    )
    last = cells.namespace["heuristic"].iloc[-1]
    assert (last["final_answer"], bool(last["right?"])) == ("2", False)
    assert "final_answer is right on 16 of 19 rows" in cells.printed


def test_another_example_index_changes_the_question_not_the_template(default) -> None:
    """The guide's answer: the token count follows the question's, the template around it
    (system turn, `<think>` at the end) stays the same. Example 5 is a shorter question."""
    other = run_cells(NOTEBOOK, {"example_index": 5})
    tokenizer = default.namespace["course"].tokenizer
    texts, template_tokens = [], set()
    for cells in (default, other):
        question = cells.namespace["row"]["question"]
        text = cells.namespace["prompt_text"]
        assert text.count(question) == 1
        texts.append(text.replace(question, "QUESTION"))
        template_tokens.add(len(cells.namespace["prompt_tokens"]) - len(tokenizer.encode(question)))
    assert default.namespace["row"]["question"] != other.namespace["row"]["question"]
    rows = default.namespace["course"].train_rows
    assert rows[5]["question"] in other.namespace["prompt_text"]
    assert rows[0]["question"] not in other.namespace["prompt_text"]
    assert texts[0] == texts[1]  # everything around the question is the same
    assert len(template_tokens) == 1  # and so is its token count
    counts = [len(cells.namespace["prompt_tokens"]) for cells in (default, other)]
    assert counts[1] < counts[0] and f"{counts[1]} prompt tokens:" in other.printed


def test_a_penalty_of_half_moves_only_the_badly_formed_rows(default) -> None:
    """The guide's answer: only the badly formed rows move, from -0.1 to -0.5; the group's
    advantages go from +0.8/-0.2/-0.3/-0.3 to +1/0/-0.5/-0.5; notebooks 02 onwards, which
    import `helpers.scoring`, keep 0.1."""
    penalty = (
        "class MathEnv(Env):",
        "- 0.1 * (1.0 - correct_format)",
        "- 0.5 * (1.0 - correct_format)",
    )
    cells = run_cells(NOTEBOOK, edits=[penalty])
    before, after = rewards(default), rewards(cells)
    moved = {case for case in before if before[case] != after[case]}
    assert moved == set(BADLY_FORMED)
    assert {before[case] for case in moved} == {-0.1} and {after[case] for case in moved} == {-0.5}
    assert (after["correct"], after["wrong"]) == (1.0, 0.0)  # well formed: no penalty

    def advantages(run) -> list[float]:
        group = run.namespace["rewards"]
        return [round(r - sum(group) / len(group), 3) for r in group]

    assert advantages(default) == [0.8, -0.2, -0.3, -0.3]
    assert advantages(cells) == [1.0, 0.0, -0.5, -0.5]
    from helpers.scoring import MathEnv

    unboxed = MathEnv("q", "7", default.namespace["course"].renderer).scored(0.0, 0.0)
    assert unboxed.reward == pytest.approx(-0.1)  # the exported helper is unchanged
