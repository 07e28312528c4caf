"""pass@k from n samples: the unbiased estimator and its problem-clustered curve."""

from __future__ import annotations

from itertools import combinations

import pytest

from helpers.training import pass_at_k, pass_at_k_curve


@pytest.mark.parametrize(("samples", "correct"), [(6, 0), (6, 1), (6, 3), (6, 6), (5, 2)])
def test_pass_at_k_is_the_share_of_k_subsets_with_a_right_answer(samples, correct):
    outcomes = [True] * correct + [False] * (samples - correct)
    for k in range(1, samples + 1):
        subsets = list(combinations(outcomes, k))
        assert pass_at_k(samples, correct, k) == pytest.approx(
            sum(any(s) for s in subsets) / len(subsets)
        )


def test_the_curve_averages_problems_and_a_gain_against_itself_is_zero():
    problems = [{"samples": 4, "correct": c} for c in (0, 1, 2, 4)]
    curve = pass_at_k_curve(problems, 4)
    assert curve["value"][0] == pytest.approx((0 + 0.25 + 0.5 + 1) / 4)  # pass@1: correct rate
    assert curve["value"][-1] == pytest.approx(3 / 4)  # pass@4: any right of all 4
    assert all(curve["low"] <= curve["value"]) and all(curve["value"] <= curve["high"])
    same = pass_at_k_curve(problems, 4, problems)
    assert not same["value"].any() and not same["low"].any() and not same["high"].any()
    with pytest.raises(ValueError, match="pass@8 needs at least 8 samples"):
        pass_at_k_curve(problems, 8)
