"""Numbers notebook 01 states about rewards are the ones `MathEnv` pays."""

from __future__ import annotations

import inspect
import re

from helpers.scoring import MathEnv
from tests.notebook_source import cell, guide_section, numbers

NOTEBOOK = "01_scoring"


def reward(correct: float, well_formed: float) -> float:
    return round(MathEnv("q", "a", None).scored(correct, well_formed).reward, 6)


def test_the_reward_sentence_states_the_rewards_and_the_steps_between_them() -> None:
    """The sentence after 01's table gives the three rewards and the two steps between them,
    as `MathEnv.scored` pays them, and no other number."""
    text = cell(NOTEBOOK, "cell-26").split("\n\n", 1)[0]
    right, wrong, badly_formed = reward(1, 1), reward(0, 1), reward(0, 0)
    being_wrong, bad_format = right - wrong, round(wrong - badly_formed, 6)
    assert {being_wrong, bad_format, badly_formed} <= numbers(text)
    assert numbers(text) <= {right, wrong, badly_formed, being_wrong, bad_format}


def test_the_penalty_exercise_names_the_method_that_holds_the_penalty() -> None:
    """The penalty exercise, in 01 and in the guide, names the `MathEnv` method that holds the
    penalty it says to change, and quotes that method's code as it is."""
    penalty = round(reward(0, 1) - reward(0, 0), 6)
    bullets = [b for b in cell(NOTEBOOK, "cell-30").split("\n- ") if "0.5" in b]
    bullets += [b for b in guide_section(NOTEBOOK).split("\n- ") if "0.5" in b]
    assert len(bullets) == 2
    for bullet in bullets:
        assert penalty in numbers(bullet), bullet
        named = re.findall(r"MathEnv\.(\w+)", bullet)
        assert named, bullet
        for method in named:
            source = " ".join(inspect.getsource(getattr(MathEnv, method)).split())
            assert str(penalty) in source, method
            quoted = [code for code in re.findall(r"`([^`]+)`", bullet) if str(penalty) in code]
            assert all(" ".join(code.split()) in source for code in quoted), quoted
