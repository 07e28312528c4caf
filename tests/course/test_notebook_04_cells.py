"""Notebook 10's rendering cells, run in process on made-up values: the loophole report says
what the guide's grader paid, and its outcome sentence says whether RL found the hole. Each
check compares numbers worked out here with the numbers a cell renders."""

from __future__ import annotations

import asyncio
import math
import re

import numpy as np
import pytest
from IPython.display import Markdown

from exercises.reward_hacking import direction
from helpers.notebook_parameters import LOOP_NOTEBOOK, NOTEBOOK_PARAMETERS
from helpers.scoring import GuideMathEnv, MathEnv
from kimi import offline_kimi_tokenizer
from tests.notebook_source import cell, flat, guide_section, numbers

NOTEBOOK = "10_reward_hacking"
LOOPHOLE_STEPS, ROLLOUTS = 60, 64


def reward(correct: float, well_formed: float) -> float:
    return round(MathEnv("q", "a", None).scored(correct, well_formed).reward, 6)


def loophole_counts(skip_first: int, skip_last: int, paid: int, in_full: int) -> dict:
    """Counts for 60 steps of 64 rollouts: under the guide's grader the skips per step go from
    skip_first (first half) to skip_last, `paid` of them paid as correct each step, `in_full`
    of those in full; under the fixed grader 4 skips a step, none paid."""

    def counts(skips: list[int], paid: int, in_full: int) -> list[dict]:
        return [
            {"step": step, "rollouts": ROLLOUTS, "skipped": skipped, "skipped_and_paid": paid,
             "skipped_and_paid_in_full": in_full, "well_formed": 60}
            for step, skipped in enumerate(skips)
        ]  # fmt: skip

    half = LOOPHOLE_STEPS // 2
    guide = counts([skip_first] * half + [skip_last] * half, paid, in_full)
    fixed = counts([4] * LOOPHOLE_STEPS, 0, 0)
    return {"steps": LOOPHOLE_STEPS, "counts": {"guide's grader": guide, "fixed grader": fixed}}


def loophole_cell(loophole: dict) -> dict:
    namespace = {"np": np, "Markdown": Markdown, "loophole": loophole, "direction": direction}
    exec(cell(NOTEBOOK, "outcome"), namespace)
    return namespace


def rose_beyond_two_standard_errors(before: float, after: float, rollouts: int) -> bool:
    return after - before > 2 * math.sqrt((before * (1 - before) + after * (1 - after)) / rollouts)


@pytest.mark.parametrize(("skip_first", "skip_last"), [(5, 14), (6, 6)], ids=["rose", "flat"])
def test_the_loophole_report_renders_what_the_guide_grader_paid(
    skip_first: int, skip_last: int
) -> None:
    paid, in_full = 5, 2  # per step: 300 paid in all, 120 in full and 180 after a cut-off
    namespace = loophole_cell(loophole_counts(skip_first, skip_last, paid, in_full))
    text = flat("\n".join(namespace["lines"]))
    # The cell's own words for a rise and for no change, asked of its `direction`.
    window = 10  # steps at each end, of the 60
    rollouts = window * ROLLOUTS
    rise = namespace["direction"](0.0, 0.5, rollouts)
    steady = namespace["direction"](0.3, 0.3, rollouts)
    assert rise != steady
    rose = rose_beyond_two_standard_errors(skip_first / ROLLOUTS, skip_last / ROLLOUTS, rollouts)
    assert rose == (skip_last > skip_first)  # the made-up counts are what their id says
    assert (rise in text) == rose and steady in text  # the fixed grader's never moves
    skipped = LOOPHOLE_STEPS // 2 * (skip_first + skip_last)
    cut_off_pay = reward(correct=1, well_formed=0)
    paid_in_all = [LOOPHOLE_STEPS * n for n in (paid, in_full, paid - in_full)]
    assert {skipped, *paid_in_all, cut_off_pay} <= numbers(text)
    # The fixed grader's skip rate never moves here, so a rise under the guide's counts.
    found = (
        "may have exploited the hole"
        if rose
        else "showed no sign of exploiting the hole beyond its noise"
    )
    assert text.startswith(f"**The outcome:** in {LOOPHOLE_STEPS} steps, RL {found}")


def guide_score(completion: str, renderer) -> tuple[float, float]:
    env = GuideMathEnv("What is 12 plus 2?", "12 + 2 = 14.", renderer)
    result = asyncio.run(env.step(offline_kimi_tokenizer().encode(completion)))
    return round(result.reward, 6), result.metrics["format"]


def test_the_loophole_texts_state_what_each_kind_of_skip_pays(renderer) -> None:
    """The guide's grader, run on a skip that stopped cleanly and on one cut off, pays what
    notebook 04's text and the guide's loophole bullet state, and its format rate sees only
    the cut-off kind; the bullet's recorded skip rates include a rise and a run without one."""
    clean, clean_format = guide_score(r"12 + 2 = 14 so \boxed{14}<|im_end|>", renderer)
    cut_off, cut_off_format = guide_score(r"12 + 2 = 14 so \boxed{14} hmm let me", renderer)
    assert (clean, clean_format) == (reward(1, 1), 1) and cut_off_format == 0
    assert reward(0, 1) < cut_off < clean  # a skip beats a clean wrong answer
    assert cut_off in numbers(cell(NOTEBOOK, "why-a-hole-pays"))
    (bullet,) = [b for b in guide_section(NOTEBOOK).split("\n- ") if "</think>" in b]
    bullet = flat(bullet.split("**What to watch for.**", 1)[0])
    assert cut_off in numbers(bullet)
    parameters = NOTEBOOK_PARAMETERS[LOOP_NOTEBOOK]  # 10 trains at notebook 04's defaults
    rollouts = 10 * parameters["group_size"].value * parameters["groups_per_step"].value
    pairs = re.findall(r"(\d\.\d+) → (\d\.\d+)", bullet)
    skip_rates = [(float(a), float(b)) for a, b in pairs if max(float(a), float(b)) < 0.5]
    rise = direction(0.0, 0.5, rollouts)
    moved = [direction(a, b, rollouts) for a, b in skip_rates]
    assert rise in moved and any(way != rise for way in moved), skip_rates
