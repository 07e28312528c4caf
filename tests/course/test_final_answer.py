"""`final_answer` on orca-math-style worked solutions we wrote, against the last-number rule.

orca-math stores no bare answers, so the extraction cannot be measured on it. These rows
imitate its solutions: most end as its solutions usually do ("... = 75 marbles."), the rest
are traps that end with something other than the answer. Each row is (solution, the answer
it arrives at). Measured on this table (issue 28): the rule it replaced (a box, else the
last number) is right on 14 of 26 rows, `final_answer` on 24 of 26; the two it still misses
are `STILL_FOOLED`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import nbformat
import pandas as pd
import pytest

from helpers.scoring import NUMBER, extract_boxed, final_answer, normalize_answer

ROWS = [
    # Ending with the answer, as most orca-math solutions do.
    ("Tom has 12 + 7 = 19 apples.", "19"),
    ("There are 48 + 27 = 75 marbles. So, there are 75 marbles in all.", "75"),
    ("Each notebook costs $2.50, so 4 notebooks cost 4 * $2.50 = $10.00.", "10"),
    ("Let the number be x. Then 3x + 5 = 20, so 3x = 15 and x = 5.", "5"),
    ("The total weight is 2.5 kg + 1.75 kg = 4.25 kg.", "4.25"),
    ("The fraction of the pizza left is 1 - 3/8 = 5/8.", "5/8"),
    ("The result is \\( 2^{10} = 1024 \\).", "1024"),
    ("The theatre sold 750 + 500 = 1,250 tickets.", "1250"),
    ("The temperature fell from 3 to 3 - 8 = -5 degrees.", "-5"),
    ("Therefore, the train travels 60 km/h * 3 h = 180 km.", "180"),
    ("The cost is 4 * 2.5 = 10 dollars. With the 3 dollar fee she pays 13 dollars.", "13"),
    ("The boxed answer is \\boxed{42}, twice the 21 we began with.", "42"),
    ("She had 30 stickers and gave away 12, so she has 30 - 12 = 18 stickers left.", "18"),
    ("A 20% discount on $80 is $16, so the price is $80 - $16 = $64.", "64"),
    # Traps: the answer is followed by another number.
    ("The answer is 7 boxes (84 eggs in all).", "7"),
    ("So 48 - 36 = 12 cookies are left (out of 48).", "12"),
    ("Each box holds 12 eggs, so 84 / 12 = 7 boxes hold all 84.", "7"),
    ("He has 7 + 5 = 12 apples, 2 more than Sam.", "12"),
    ("The trip takes 150 / 60 = 2.5 hours, that is, 2 hours and 30 minutes.", "2.5"),
    ("Answer: 45 minutes, or 0.75 of an hour.", "45"),
    ("The final answer is $36, since 3 shirts at $12 each make 3 * 12.", "36"),
    ("Together they read 25 + 17 = 42 pages (Ann 25, Ben 17).", "42"),
    ("The garden's area is 6 * 9 = 54 square meters, so 54 / 2 = 27 plants fit, 1 per 2 m.", "27"),
    ("So the answer is 15 students, which is 3 more than last year's 12.", "15"),
    # Still fooled: nothing in the wording marks the answer.
    ("The larger angle measures 110 degrees, and the smaller one 70 degrees.", "110"),
    ("Half of the 40 students, 20, chose soccer; the rest chose one of 2 other sports.", "20"),
]
STILL_FOOLED = {ROWS[-2][0], ROWS[-1][0]}


def last_number(reference: str) -> str:
    """The rule `final_answer` replaced: the boxed value, else the last number written."""
    boxed = extract_boxed(reference)
    if boxed is not None:
        return boxed
    numbers = NUMBER.findall(reference)
    return numbers[-1].rstrip(",") if numbers else reference


def right(found: str, answer: str) -> bool:
    return normalize_answer(found) == normalize_answer(answer)


@pytest.mark.parametrize(("reference", "answer"), ROWS, ids=[r[:40] for r, _ in ROWS])
def test_final_answer_on_each_row(reference: str, answer: str) -> None:
    assert right(final_answer(reference), answer) == (reference not in STILL_FOOLED)


def test_final_answer_beats_the_last_number_on_the_table() -> None:
    """The accuracies the module docstring quotes."""
    assert len(ROWS) >= 15
    before = sum(right(last_number(r), a) for r, a in ROWS)
    after = sum(right(final_answer(r), a) for r, a in ROWS)
    assert (before, after, len(ROWS)) == (14, 24, 26)
    # It never loses a row the last number got right.
    assert all(right(final_answer(r), a) for r, a in ROWS if right(last_number(r), a))


def test_a_local_dataset_solution_still_gives_its_result() -> None:
    from local_stack.client.dataset import arithmetic_dataset

    for row in arithmetic_dataset()["train"].select(range(50)):
        result = row["answer"].rsplit("= ", 1)[1].split()[0].rstrip(".")  # "... = 14 pens."
        assert final_answer(row["answer"]) == result


# -- rows in orca-math's published answer format, from a data file --

ROOT = Path(__file__).resolve().parents[2]
# Notebook 01 reads the file the same way, and says in its markdown where the rows come from.
ORCA_FILE = ROOT / "helpers" / "orca_style_answers.jsonl"
ORCA_ROWS = [json.loads(line) for line in ORCA_FILE.read_text().splitlines() if line.strip()]
# The rows `final_answer` gets wrong today, by the start of their question: each names a
# number after its answer in its final sentence (a threshold, a rate's other form, the
# class average, a fraction's decimal) or closes on a value computed before the answer.
KNOWN_MISSES = {
    "In a city election, Mr. Lopez",
    "The sum of three consecutive even numbers",
    "Simple interest on $2,500",
    "Eunji's score was 8 points",
    "There are 5 red, 7 blue and 8 green",
}


def test_the_orca_format_rows_are_many_and_each_names_its_source() -> None:
    assert len(ORCA_ROWS) >= 30
    assert len({r["question"] for r in ORCA_ROWS}) == len(ORCA_ROWS)
    for row in ORCA_ROWS:
        assert set(row) == {"question", "answer", "final", "source"}, row
        assert all(isinstance(v, str) and v.strip() for v in row.values()), row
        assert "card" in row["source"], row["source"]
        # The stated answer appears in the solution: the row is self-consistent.
        assert normalize_answer(row["final"]) in {
            normalize_answer(n) for n in NUMBER.findall(row["answer"])
        } | {row["final"]}, row


def test_final_answer_on_the_orca_format_rows() -> None:
    missed = {
        row["question"] for row in ORCA_ROWS if not right(final_answer(row["answer"]), row["final"])
    }
    assert {m for m in missed if m.startswith(tuple(KNOWN_MISSES))} == missed
    assert len(missed) == len(KNOWN_MISSES)


def test_notebook_01_states_the_miss_rate_from_the_file(tmp_path: Path) -> None:
    """Its cell renders the count and the rates of whatever rows the file holds."""
    cells = nbformat.read(ROOT / "notebooks" / "01_scoring.ipynb", as_version=4).cells
    [source] = [c.source for c in cells if c.cell_type == "code" and ORCA_FILE.name in c.source]
    rows = ORCA_ROWS[:10]  # another count than the file's, so no figure can be pasted
    (tmp_path / ORCA_FILE.name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    helpers_here = SimpleNamespace(__file__=str(tmp_path / "__init__.py"))  # the cell's package
    shown: list = []
    namespace = {"final_answer": final_answer, "same": right, "last_number": last_number}
    exec(  # noqa: S102
        source.replace("display(", "shown.append("),
        {**namespace, "helpers": helpers_here, "pd": pd, "shown": shown},
    )
    (markdown,) = shown
    misses = sum(not right(final_answer(r["answer"]), r["final"]) for r in rows)
    last = sum(not right(last_number(r["answer"]), r["final"]) for r in rows)
    stated = {int(n) for n in re.findall(r"\d+", markdown.data)}
    assert {len(rows), misses, last, round(100 * misses / len(rows))} <= stated, markdown.data
