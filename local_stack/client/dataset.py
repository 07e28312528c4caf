"""The local backend's data: a small arithmetic word-problem set, generated offline from a seed.

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
    return [row for pair in operand_pairs() for row in problems_of_pair(*pair)]


def operand_pairs() -> list[tuple[int, int]]:
    """Every unordered pair of operands, as (larger, smaller)."""
    return [(a, b) for a in range(MAX_OPERAND + 1) for b in range(a + 1)]


def problems_of_pair(a: int, b: int) -> list[dict[str, str]]:
    """All problems on the numbers a >= b: both sums (a + b, b + a) and the difference a - b.

    A pair is the unit of the held-out split: the warm-up that built the local model writes
    the wrong operation now and then, so holding out `a - b` alone while `a + b` is trained
    would still show the model those two numbers together.
    """
    rows = []
    for x, y in [(a, b)] if a == b else [(a, b), (b, a)]:
        rows += [_row(q, s, x, y, x + y) for q, s in SUM_TEMPLATES]
    rows += [_row(q, s, a, b, a - b) for q, s in DIFFERENCE_TEMPLATES]
    return rows


def _row(question: str, solution: str, a: int, b: int, c: int) -> dict[str, str]:
    return {"question": question.format(a=a, b=b), "answer": solution.format(a=a, b=b, c=c)}


def arithmetic_dataset(
    seed: int = 0, held_out_pairs: int = 46, known_pairs: int = 46, reworded_facts: int = 150
) -> DatasetDict:
    """Four splits, shuffled with `seed`, that keep facts apart, not just questions.

    - `held_out`: every problem on `held_out_pairs` operand pairs that nothing ever sees, in
      any wording, order or operation, neither the warm-up that built the local model nor
      RL: it measures facts the model never learnt.
    - `held_out_known`: every problem on `known_pairs` other operand pairs, which the
      warm-up saw (as a pretrained model has seen its facts) but RL never trains on: it
      measures whether RL draws out what the model already knows.
    - `held_out_seen`: `reworded_facts` facts (a, b, operation) that training does see, each in
      one wording training does not: it measures recall of trained facts in new words.
    - `train`: everything else.
    """
    rng = random.Random(seed)
    pairs = operand_pairs()
    rng.shuffle(pairs)
    held_out = [row for pair in pairs[:held_out_pairs] for row in problems_of_pair(*pair)]
    known_end = held_out_pairs + known_pairs
    known = [row for pair in pairs[held_out_pairs:known_end] for row in problems_of_pair(*pair)]
    trained = [problems_of_pair(*pair) for pair in pairs[known_end:]]
    # A pair's problems come in blocks of three wordings per fact (see problems_of_pair).
    facts = [rows[i : i + 3] for rows in trained for i in range(0, len(rows), 3)]
    rng.shuffle(facts)
    reworded, train = [], []
    for index, wordings in enumerate(facts):
        if index < reworded_facts:
            kept = rng.randrange(len(wordings))
            reworded.append(wordings[kept])
            train += wordings[:kept] + wordings[kept + 1 :]
        else:
            train += wordings
    rng.shuffle(train)
    rng.shuffle(held_out)
    rng.shuffle(known)
    return DatasetDict(
        train=Dataset.from_list(train),
        held_out=Dataset.from_list(held_out),
        held_out_known=Dataset.from_list(known),
        held_out_seen=Dataset.from_list(reworded),
    )
