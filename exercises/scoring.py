"""Notebook 01's exercises: the grader's rule and the answer matching, written by the learner.

The references are the course's own (`helpers.scoring`, exported from the notebook's
solutions); each mistake below is a small version of the function that makes one typical
error on purpose.
"""

from __future__ import annotations

import re
from typing import Any

from tinker_cookbook.exceptions import RendererError

from exercises.check import Case, Exercise, Mistake
from helpers.scoring import graded_text, normalize_answer
from kimi import offline_kimi_renderer

END = "<|im_end|>"

# ---------------------------------------------------------------------------------------------
# graded_text: only the text after a closed </think>, in a completion that stopped cleanly.

# What the model writes after the prompt's `<think>`: the label a hint shows, and the text.
_COMPLETIONS = [
    ("thinks, closes, answers, stops", rf"12 + 2 = 14</think>The answer is \boxed{{14}}.{END}"),
    ("never closes its thinking", rf"12 + 2 = 14 so \boxed{{14}}{END}"),
    ("answers, but is cut off before the stop token", r"12 + 2 = 14</think>\boxed{14}. And"),
    ("cut off while thinking", r"12 + 2 = 14 so \boxed{14} hmm let me"),
    ("closes, answers, thinks again", rf"12 + 2</think>\boxed{{14}}<think>or 15?{END}"),
    ("closes twice", rf"12 + 2 = 13</think>\boxed{{13}}? No</think>\boxed{{14}}{END}"),
    ("closes at once, answers nothing", f"</think>{END}"),
]


def _graded_text_cases(renderer: Any) -> list[Case]:
    return [
        Case(f"{label}: {text}", (renderer, renderer.tokenizer.encode(text)))
        for label, text in _COMPLETIONS
    ]


def _stopped_text(renderer: Any, action: list[int]) -> str | None:
    """The decoded text before the stop token, or None unless the completion stopped cleanly
    (what the typical mistakes below share with the reference)."""
    try:
        _, termination = renderer.parse_response(action)
    except RendererError:
        return None
    if not termination.is_clean:
        return None
    stop = renderer.get_stop_sequences()
    return renderer.tokenizer.decode(action[: next(i for i, t in enumerate(action) if t in stop)])


def _thinking_included(renderer: Any, action: list[int]) -> str | None:
    text = _stopped_text(renderer, action)
    return text if text is not None and "</think>" in text else None


def _stop_token_kept(renderer: Any, action: list[int]) -> str | None:
    if _stopped_text(renderer, action) is None:
        return None
    _, closed, answer = renderer.tokenizer.decode(action).rpartition("</think>")
    return answer if closed and "<think>" not in answer else None


def _unclosed_thinking_graded(renderer: Any, action: list[int]) -> str | None:
    text = _stopped_text(renderer, action)
    if text is None:
        return None
    _, closed, answer = text.rpartition("</think>")
    if not closed:
        return text
    return answer if "<think>" not in answer else None


def _truncation_graded(renderer: Any, action: list[int]) -> str | None:
    stop = renderer.get_stop_sequences()
    ids = action[: next((i for i, t in enumerate(action) if t in stop), len(action))]
    _, closed, answer = renderer.tokenizer.decode(ids).rpartition("</think>")
    return answer if closed and "<think>" not in answer else None


def _new_thinking_graded(renderer: Any, action: list[int]) -> str | None:
    text = _stopped_text(renderer, action)
    _, closed, answer = (text or "").rpartition("</think>")
    return answer if closed else None


def _first_close(renderer: Any, action: list[int]) -> str | None:
    text = _stopped_text(renderer, action)
    _, closed, answer = (text or "").partition("</think>")
    return answer if closed and "<think>" not in answer else None


async def _kimi_renderer() -> dict[str, Any]:
    return {"renderer": offline_kimi_renderer()}


GRADED_TEXT = Exercise(
    name="graded_text",
    notebook="01_scoring",
    minutes=10,
    reference=graded_text,
    cases=_graded_text_cases,
    test_context=_kimi_renderer,
    mistakes=[
        Mistake(
            "the thinking graded with the answer",
            "you returned the whole completion, thinking included. Anything boxed while "
            "thinking would then count; return only the text after `</think>`.",
            _thinking_included,
        ),
        Mistake(
            "an answer taken from inside unclosed thinking",
            "the thinking never closed, and you graded it anyway. A completion with no "
            "`</think>` has no answer yet: return None, or a guess boxed while thinking "
            "earns full marks.",
            _unclosed_thinking_graded,
        ),
        Mistake(
            "a truncated completion graded",
            "this completion was cut off (no stop token: `termination.is_clean` is False), "
            "and you graded it. A cut-off answer may be unfinished: return None.",
            _truncation_graded,
        ),
        Mistake(
            "the stop token kept in the text",
            "your text still ends with the stop token `<|im_end|>`: you decoded every id. "
            "Decode only the ids before the stop token (its id is in "
            "`renderer.get_stop_sequences()`).",
            _stop_token_kept,
        ),
        Mistake(
            "a new <think> after the answer ignored",
            "after its answer, the model opened a new `<think>` and never closed it, so it had "
            "not finished: return None when `<think>` appears in the text after the last "
            "`</think>`.",
            _new_thinking_graded,
        ),
        Mistake(
            "split at the first </think>",
            "you split at the first `</think>`; the answer is what follows the last one "
            "(`str.rpartition`, not `partition` or `split(...)[1]`).",
            _first_close,
        ),
    ],
)

# ---------------------------------------------------------------------------------------------
# normalize_answer: one spelling per answer, so that equal answers compare equal.

_ANSWERS = [
    ("a whole number written as a float", "19.0"),
    ("a comma that is no thousands separator", "1,2"),
    ("a negative number", "-2"),
    ("a decimal", "2.5"),
    ("a dollar amount in LaTeX", r"\$10"),
    ("a word", "Nineteen"),
    ("spaces and a thousands comma", " 1,000 "),
    ("a dollar amount with cents and a full stop", "$10.00."),
    ("two thousands commas", "1,234,567"),
    ("a fraction", r"\frac{1}{2}"),
]


def _normalize_answer_cases() -> list[Case]:
    return [Case(f"{label}: {answer}", (answer,)) for label, answer in _ANSWERS]


def _canonical(text: str) -> str:
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else repr(number)


def _cleaned(answer: str) -> str:
    text = re.sub(r"\s+|\\?\$", "", answer.lower()).rstrip(".")
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)


def _every_comma_dropped(answer: str) -> str:
    return _canonical(re.sub(r"\s+|\\?\$|,", "", answer.lower()).rstrip("."))


def _numbers_not_canonical(answer: str) -> str:
    return _cleaned(answer)


def _minus_dropped(answer: str) -> str:
    return _canonical(_cleaned(answer).lstrip("-"))


def _decimals_truncated(answer: str) -> str:
    text = _cleaned(answer)
    try:
        return str(int(float(text)))
    except ValueError:
        return text


def _latex_dollar_kept(answer: str) -> str:
    text = re.sub(r"\s+|\$", "", answer.lower()).rstrip(".")
    return _canonical(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text))


def _case_kept(answer: str) -> str:
    text = re.sub(r"\s+|\\?\$", "", answer).rstrip(".")
    return _canonical(re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text))


NORMALIZE_ANSWER = Exercise(
    name="normalize_answer",
    notebook="01_scoring",
    minutes=10,
    reference=normalize_answer,
    cases=_normalize_answer_cases,
    mistakes=[
        Mistake(
            "every comma dropped",
            "you dropped every comma, so a model that boxes `1,2` for 12 would be paid. Drop "
            "a comma only between a digit and exactly three more digits (a thousands "
            "separator), for example with `re.sub(r'(?<=\\d),(?=\\d{3}(?!\\d))', '', text)`.",
            _every_comma_dropped,
        ),
        Mistake(
            "numbers left as written",
            "`19.0` and `19` must come out the same: when the cleaned text reads as a number "
            "(`float(text)` succeeds), write it as `str(int(number))` if it is whole.",
            _numbers_not_canonical,
        ),
        Mistake(
            "the minus sign dropped",
            "the minus sign went missing, so -2 would match 2. Keep it: strip only "
            "whitespace, dollar signs, thousands commas and the periods at the end.",
            _minus_dropped,
        ),
        Mistake(
            "decimals truncated",
            "you truncated a decimal to an integer (`int(float(text))`), so 2.5 would match "
            "2. Only a whole number becomes an integer (`number.is_integer()`); write the "
            "others with `repr(number)`.",
            _decimals_truncated,
        ),
        Mistake(
            "LaTeX's \\$ kept",
            "LaTeX writes a dollar sign as `\\$`, and you left its backslash behind. Drop the "
            "dollar sign with its optional backslash, for example `re.sub(r'\\\\?\\$', '', text)`.",
            _latex_dollar_kept,
        ),
        Mistake(
            "not lower-cased",
            "an answer in words should match whatever its capitals: lower-case the text first.",
            _case_kept,
        ),
    ],
)
