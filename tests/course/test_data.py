"""The local data's splits keep facts apart, so held-out results measure what they say."""

from __future__ import annotations

import re

from local_stack.client.dataset import all_problems, arithmetic_dataset

EQUATION = re.compile(r"(\d+) ([+-]) (\d+) = (\d+)")


def fact(row: dict[str, str]) -> tuple[int, str, int]:
    a, op, b, _ = EQUATION.search(row["answer"]).groups()
    return int(a), op, int(b)


def numbers(row: dict[str, str]) -> frozenset[int]:
    a, _, b = fact(row)
    return frozenset((a, b))


def test_no_held_out_fact_is_trained_in_any_wording_order_or_operation() -> None:
    splits = arithmetic_dataset()
    trained_pairs = {numbers(r) for r in splits["train"]}
    held_out_facts = {fact(r) for r in splits["held_out"]}
    assert held_out_facts.isdisjoint(fact(r) for r in splits["train"])
    assert trained_pairs.isdisjoint(numbers(r) for r in splits["held_out"])
    assert len(held_out_facts) >= 100


def test_seen_facts_are_trained_but_their_held_out_wording_is_not() -> None:
    splits = arithmetic_dataset()
    trained_facts = {fact(r) for r in splits["train"]}
    trained_questions = {r["question"] for r in splits["train"]}
    seen = list(splits["held_out_seen"])
    assert len(seen) == len({fact(r) for r in seen}) >= 100  # one wording per fact
    assert all(fact(r) in trained_facts for r in seen)
    assert trained_questions.isdisjoint(r["question"] for r in seen)


def test_splits_cover_every_problem_once_and_repeat_for_a_seed() -> None:
    splits = arithmetic_dataset(seed=3)
    every = [r["question"] for split in splits.values() for r in split]
    assert sorted(every) == sorted(r["question"] for r in all_problems())
    assert arithmetic_dataset(seed=3)["held_out"]["question"] == splits["held_out"]["question"]
    assert arithmetic_dataset(seed=4)["held_out"]["question"] != splits["held_out"]["question"]


def test_known_facts_are_kept_from_rl_and_from_the_unseen_split() -> None:
    """held_out_known: pairs the warm-up shows the base model (see build_tiny_base) but RL's
    train split never holds, apart from the pairs nothing ever shows."""
    splits = arithmetic_dataset()
    known_pairs = {numbers(r) for r in splits["held_out_known"]}
    assert known_pairs.isdisjoint(numbers(r) for r in splits["train"])
    assert known_pairs.isdisjoint(numbers(r) for r in splits["held_out"])
    assert known_pairs.isdisjoint(numbers(r) for r in splits["held_out_seen"])
    assert len({fact(r) for r in splits["held_out_known"]}) >= 100
