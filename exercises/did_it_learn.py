"""Notebook 05's exercise: pass@k, the chance that at least one of k answers is right,
estimated without bias from n answers of which c are right."""

from __future__ import annotations

from math import comb

from exercises.check import Case, Exercise, Mistake


def _pass_at_k(samples: int, correct: int, k: int) -> float:
    return 1.0 - comb(samples - correct, k) / comb(samples, k)


def _cases() -> list[Case]:
    # First: every typical mistake gives an answer of its own here, so each gets its hint.
    return [
        Case("16 answers, 5 of them right, k = 2", (16, 5, 2)),
        Case("16 answers, 4 right, k = 1 (the correct rate)", (16, 4, 1)),
        Case("16 answers, 3 right, k = 4 (fewer right answers than k)", (16, 3, 4)),
        Case("16 answers, none right, k = 16", (16, 0, 16)),
        Case("8 answers, 6 right, k = 3 (fewer wrong answers than k)", (8, 6, 3)),
    ]


PASS_AT_K = Exercise(
    name="pass_at_k",
    notebook="05_did_it_learn",
    minutes=8,
    reference=_pass_at_k,
    cases=_cases,
    mistakes=[
        Mistake(
            "the chance that all k are wrong",
            "you returned C(samples - correct, k) / C(samples, k), the chance that k answers "
            "drawn from the n are all wrong. pass@k is the chance that at least one is right: "
            "1 minus that.",
            lambda samples, correct, k: comb(samples - correct, k) / comb(samples, k),
        ),
        Mistake(
            "drawn with replacement",
            "you used 1 - (1 - correct / samples) ** k, as if the k answers were drawn with "
            "replacement. From n answers the k are drawn without replacement, and plugging the "
            "observed rate into a power is biased (Chen et al. 2021): use "
            "1 - C(samples - correct, k) / C(samples, k), with math.comb.",
            lambda samples, correct, k: 1 - (1 - correct / samples) ** k,
        ),
        Mistake(
            "the chance that all k are right",
            "you returned C(correct, k) / C(samples, k), the chance that all k answers are "
            "right. pass@k asks for at least one: count the draws with no right answer, "
            "C(samples - correct, k), and take 1 minus their share.",
            lambda samples, correct, k: comb(correct, k) / comb(samples, k),
        ),
        Mistake(
            "counted from the right answers",
            "you returned 1 - C(correct, k) / C(samples, k): 1 minus the chance that all k are "
            "right. pass@k is 1 minus the chance that none is right: count the draws with no "
            "right answer, C(samples - correct, k).",
            lambda samples, correct, k: 1 - comb(correct, k) / comb(samples, k),
        ),
        Mistake(
            "chances added",
            "you added the k tries' chances (k x correct / samples, capped at 1), as if they "
            "could not succeed together. They can, so the sum counts some draws twice: use "
            "1 - C(samples - correct, k) / C(samples, k).",
            lambda samples, correct, k: min(1.0, k * correct / samples),
        ),
        Mistake(
            "integer division",
            "you divided with //, which rounds the share of all-wrong draws down to a whole "
            "number (0 here), so pass@k came out 1: divide with /.",
            lambda samples, correct, k: 1 - comb(samples - correct, k) // comb(samples, k),
        ),
    ],
)
