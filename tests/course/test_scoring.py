"""The reward: unit cases from notebook 01, and a fuzz test that it never raises."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers.scoring import (
    MathEnv,
    MathGroupBuilder,
    answer_matches,
    extract_boxed,
    final_answer,
    normalize_answer,
)
from kimi import offline_kimi_tokenizer

END = "<|im_end|>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"\boxed{19}", "19"),
        (r"\boxed {19}", "19"),
        (r"\boxed{\frac{1}{2}}", r"\frac{1}{2}"),
        (r"\boxed{18} then \boxed{19}", "19"),
        (r"\boxed{19", None),
        ("no box", None),
        ("", None),
    ],
)
def test_extract_boxed(text: str, expected: str | None) -> None:
    assert extract_boxed(text) == expected


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("So he has 7 + 12 = 19 apples.", "19"),
        ("In total 1,250 tickets.", "1,250"),
        ("Therefore, Mia spends $10.00.", "10.00"),
        (r"The answer is \boxed{7}, not 8.", "7"),
        ("no numbers here", "no numbers here"),
    ],
)
def test_final_answer(reference: str, expected: str) -> None:
    assert final_answer(reference) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [("1,000", "1000"), (" 19 ", "19"), ("19.0", "19"), ("$10", "10.00"), ("12.", "12")],
)
def test_normalize_answer_equates(a: str, b: str) -> None:
    assert normalize_answer(a) == normalize_answer(b)


def test_normalize_answer_keeps_different_numbers_apart() -> None:
    assert normalize_answer("0.5") != normalize_answer("5")
    assert normalize_answer("-3") != normalize_answer("3")


def test_prose_reference_matches_its_final_number() -> None:
    reference = "The baker sold 48 * 3/4 = 36 cookies, so 48 - 36 = 12 are left."
    assert answer_matches(r"\boxed{12}", reference)
    assert not answer_matches(r"\boxed{36}", reference)
    assert not answer_matches("12", reference)


def score(renderer, completion: str, answer: str = "7 + 12 = 19.") -> tuple[float, dict]:
    env = MathEnv("What is 7 plus 12?", answer, renderer)
    result = asyncio.run(env.step(offline_kimi_tokenizer().encode(completion)))
    return result.reward, result.metrics


@pytest.mark.parametrize(
    ("completion", "reward"),
    [
        (rf"</think>The answer is \boxed{{19}}.{END}", 1.0),
        (rf"</think>The answer is \boxed{{18}}.{END}", 0.0),
        (f"</think>The answer is 19.{END}", -0.1),
        (r"</think>The answer is \boxed{19}.", -0.1),  # cut off: no answer to grade
        (rf"</think>\boxed{{ 19 }}{END}", 1.0),
        (rf"</think>\boxed{{18}} no, \boxed{{19}}{END}", 1.0),
    ],
)
def test_math_env_rewards(renderer, completion: str, reward: float) -> None:
    assert score(renderer, completion)[0] == pytest.approx(reward)


def test_initial_observation_ends_in_thinking_and_stops_on_im_end(renderer) -> None:
    env = MathEnv("What is 7 plus 12?", "19", renderer)
    prompt, stop = asyncio.run(env.initial_observation())
    tokenizer = offline_kimi_tokenizer()
    assert tokenizer.decode(prompt.to_ints()).endswith("<|im_middle|><think>")
    assert [tokenizer.decode([t]) for t in stop] == [END]


def test_group_builder_makes_independent_envs(renderer) -> None:
    builder = MathGroupBuilder(
        row={"question": "q", "answer": "1"}, renderer=renderer, group_size=3
    )
    envs = asyncio.run(builder.make_envs())
    assert len(envs) == 3 and len({id(e) for e in envs}) == 3


@pytest.fixture(scope="module")
def runner():
    """One event loop for all the fuzz test's examples: a new one per example (asyncio.run)
    took a quarter of the test's time."""
    with asyncio.Runner() as runner:
        yield runner


@settings(max_examples=1_000, deadline=None, derandomize=True)
@given(
    text=st.one_of(
        st.text(),
        st.text(alphabet=st.sampled_from(list("\\boxed{}0123456789,. $-/ x"))),
        st.builds(lambda a, b: a + r"\boxed{" + b, st.text(max_size=20), st.text(max_size=20)),
    ),
    reference=st.one_of(st.text(max_size=40), st.integers().map(str)),
)
def test_scorer_never_raises_and_reward_is_one_of_three(
    renderer, runner, text: str, reference: str
) -> None:
    """1,000 generated strings, the same ones every run (derandomized): tokenize, parse,
    score; never an exception."""
    tokens = offline_kimi_tokenizer().encode(text)
    result = runner.run(MathEnv("q", reference, renderer).step(tokens))
    assert round(result.reward, 6) in {-0.1, 0.0, 1.0}


@pytest.mark.parametrize(
    ("written", "meant"), [("1,2", "12"), ("1,23", "123"), ("12,3456", "123456")]
)
def test_a_comma_that_is_no_thousands_separator_keeps_an_answer_wrong(
    written: str, meant: str
) -> None:
    assert normalize_answer(written) != normalize_answer(meant)
    assert normalize_answer("1,234,567") == normalize_answer("1234567")
