"""A small arithmetic word-problem set, generated offline from a seed.

The cloud path reads `microsoft/orca-math-word-problems-200k`, whose rows have a
`question` and an `answer` that is a worked solution in prose. This set has the same two
columns and the same kind of answer, with numbers small enough for the local tiny
model: sums and differences of numbers from 0 to 20 (single and two digits).
"""

from __future__ import annotations

import random

from datasets import Dataset, DatasetDict

MAX_OPERAND = 20

# Each template: (question, worked solution). {a} and {b} are the operands, {c} the result.
SUM_TEMPLATES = [
    (
        "Tom has {a} apples and buys {b} more. How many apples does Tom have now?",
        "Tom starts with {a} apples and buys {b} more, so he has {a} + {b} = {c} apples.",
    ),
    (
        "A shelf holds {a} books and {b} more books are added. How many books are on the shelf?",
        "There were {a} books and {b} were added, so the shelf holds {a} + {b} = {c} books.",
    ),
    ("What is {a} plus {b}?", "Adding the two numbers gives {a} + {b} = {c}."),
]
DIFFERENCE_TEMPLATES = [
    (
        "Sara has {a} stickers and gives away {b}. How many stickers does Sara have left?",
        "Sara had {a} stickers and gave away {b}, so she has {a} - {b} = {c} stickers left.",
    ),
    (
        "A box holds {a} pens and {b} pens are taken out. How many pens are left in the box?",
        "The box had {a} pens and {b} were taken out, leaving {a} - {b} = {c} pens.",
    ),
    ("What is {a} minus {b}?", "Subtracting gives {a} - {b} = {c}."),
]


def all_problems() -> list[dict[str, str]]:
    """Every (template, a, b) problem, in a fixed order; differences never go below zero."""
    rows = []
    for a in range(MAX_OPERAND + 1):
        for b in range(MAX_OPERAND + 1):
            for question, solution in SUM_TEMPLATES:
                rows.append(_row(question, solution, a, b, a + b))
            if b <= a:
                for question, solution in DIFFERENCE_TEMPLATES:
                    rows.append(_row(question, solution, a, b, a - b))
    return rows


def _row(question: str, solution: str, a: int, b: int, c: int) -> dict[str, str]:
    return {"question": question.format(a=a, b=b), "answer": solution.format(a=a, b=b, c=c)}


def arithmetic_dataset(seed: int = 0, held_out_size: int = 400) -> DatasetDict:
    """Shuffle every problem with `seed` and split off `held_out_size` of them.

    Each question appears exactly once, so `train` and `held_out` share no problem
    (the same two numbers can still appear in another wording).
    """
    rows = all_problems()
    random.Random(seed).shuffle(rows)
    return DatasetDict(
        train=Dataset.from_list(rows[held_out_size:]),
        held_out=Dataset.from_list(rows[:held_out_size]),
    )
