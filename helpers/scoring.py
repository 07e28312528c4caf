# Generated from notebooks/01_scoring.ipynb by `make helpers`. Do not edit: change
# the `# @save` cells there, then run `make helpers` again.
"""Scoring a completion: the boxed-answer reward, the math environment, its group builder."""

import re
from dataclasses import dataclass
from typing import Any

import tinker
from tinker_cookbook import renderers
from tinker_cookbook.exceptions import RendererError
from tinker_cookbook.rl.types import Env, EnvGroupBuilder, StepResult

QUESTION_SUFFIX = " Write your final answer in \\boxed{} format."


def extract_boxed(text: str) -> str | None:
    """The contents of the last `\\boxed{...}` in `text` (a restated answer usually means
    the final one), or None. Counting braces keeps `\\boxed{\\frac{1}{2}}` whole."""
    found = None
    for match in re.finditer(r"\\boxed\s*\{", text):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                found = text[start:i]
                break
    return found


NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
# A solution that names its answer outright: "The answer is 7", "Answer: $7".
ANSWER_CUE = re.compile(r"\banswer\s*(?:is|:|=)\s*(?:\\\(\s*)?\\?\$?\s*", re.IGNORECASE)
# An aside in plain parentheses, "(84 eggs in all)"; LaTeX's \( ... \) is not one.
ASIDE = re.compile(r"(?<!\\)\([^()]*(?<!\\)\)")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def final_answer(reference: str) -> str:
    """The answer a reference solution arrives at.

    orca-math's `answer` column is a worked solution in prose. Its answer is, in order of
    trust: its boxed value; the number after its last "the answer is"; else, in its last
    sentence with a number (asides in parentheses dropped), the first number after the
    last "=", or the last number when that sentence has no "=". Else the whole text.
    """
    boxed = extract_boxed(reference)
    if boxed is not None:
        return boxed
    for cue in reversed(list(ANSWER_CUE.finditer(reference))):
        named = NUMBER.match(reference, cue.end())
        if named:
            return named.group().rstrip(",")
    sentences = SENTENCE_END.split(ASIDE.sub(" ", reference))
    last = next((s for s in reversed(sentences) if NUMBER.search(s)), None)
    if last is None:
        return reference
    _, equals, result = last.rpartition("=")
    if equals and (computed := NUMBER.search(result)):
        return computed.group().rstrip(",")
    return NUMBER.findall(last)[-1].rstrip(",")


def normalize_answer(answer: str) -> str:
    """One spelling per answer, so that equal answers compare equal as strings.

    Lower-case the text; drop whitespace, dollar signs (`$`, and LaTeX's `\\$`) and every
    period at its end (`12.` and `12..` both give `12`); drop a comma only as a thousands
    separator (a digit before it, exactly three digits after it): `1,000` becomes `1000`,
    but `1,2` stays `1,2`, a wrong answer to 12. If the rest reads as a number (`float()`
    accepts it), write it as an integer when it is whole (`19.0` gives `19`; `-2` keeps its
    minus), else as `repr()` writes the float (`2.5`). Anything else stays as cleaned
    (`nineteen`, `\\frac{1}{2}`).
    """
    text = re.sub(r"\s+|\\?\$", "", answer.lower()).rstrip(".")
    text = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", text)
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else repr(number)


def answer_matches(completion: str, reference: str) -> bool:
    """True when the completion's boxed answer equals the reference's final answer."""
    boxed = extract_boxed(completion)
    if boxed is None:
        return False
    return normalize_answer(boxed) == normalize_answer(final_answer(reference))


# Where a completion's thinking ends (notebook 10 and the shell tasks read it).
THINK_CLOSE = "</think>"


def graded_text(renderer: Any, action: list[int]) -> str | None:
    """The text the grader reads in a completion (`action`, its token ids), or None.

    Only a completion that stopped cleanly has an answer: `renderer.parse_response(action)`
    returns `(message, termination)`, and `termination.is_clean` is False when sampling was
    cut off at max_tokens (no stop token); it raises `RendererError` on ids it cannot parse,
    such as two stop tokens. Then decode the ids before the stop token (its id is in
    `renderer.get_stop_sequences()`; `renderer.tokenizer.decode(ids)` gives text) and return
    what follows the last `</think>`. None when the thinking never closed, or when a new
    `<think>` opens after that last `</think>`.
    """
    try:
        _, termination = renderer.parse_response(action)
    except RendererError:
        # Two stop tokens: Sail stops at the first, but a policy that is not a sampler
        # can send anything. Unparseable counts as no answer, never as a crash.
        return None
    if not termination.is_clean:
        return None
    stop_at = next(i for i, token in enumerate(action) if token in renderer.get_stop_sequences())
    _, closed, answer = renderer.tokenizer.decode(action[:stop_at]).rpartition("</think>")
    return answer if closed and "<think>" not in answer else None


class MathEnv(Env):
    """One question, one sampled answer, one reward: 1 for a correct boxed answer, minus 0.1
    when the format is wrong (no answer to grade, see `graded_text`, or no box in it)."""

    def __init__(self, question: str, answer: str, renderer: Any) -> None:
        self.question = question
        self.answer = answer
        self.renderer = renderer

    async def initial_observation(self) -> tuple[tinker.ModelInput, Any]:
        convo = [{"role": "user", "content": self.question + QUESTION_SUFFIX}]
        return self.renderer.build_generation_prompt(convo), self.renderer.get_stop_sequences()

    async def step(self, action: list[int], *, extra: Any = None) -> StepResult:
        text = graded_text(self.renderer, action)
        correct_format = float(text is not None and extract_boxed(text) is not None)
        correct_answer = float(text is not None and answer_matches(text, self.answer))
        return self.scored(correct_answer, correct_format)

    def scored(self, correct_answer: float, correct_format: float) -> StepResult:
        return StepResult(
            reward=correct_answer - 0.1 * (1.0 - correct_format),
            episode_done=True,
            next_observation=tinker.ModelInput.empty(),
            next_stop_condition=[],
            metrics={"correct": correct_answer, "format": correct_format},
            logs={"question": self.question},  # which problem a rollout answered
        )


@dataclass(frozen=True)
class MathGroupBuilder(EnvGroupBuilder):
    """Fans one problem out into `group_size` environments: GRPO compares their rewards."""

    row: dict
    renderer: Any
    group_size: int
    grader: type[MathEnv] = MathEnv

    async def make_envs(self) -> list[MathEnv]:
        return [
            self.grader(self.row["question"], self.row["answer"], self.renderer)
            for _ in range(self.group_size)
        ]

    async def compute_group_rewards(self, trajectory_group, env_group):
        # The reward lives in MathEnv.step, so there is no extra group-level bonus.
        return [(0.0, {}) for _ in trajectory_group]

    def logging_tags(self) -> list[str]:
        return ["math"]


class GuideMathEnv(MathEnv):
    """MathEnv with the guide's `step`, kept to compare against: it grades
    `renderers.get_text_content(message)`, which is the whole completion, thinking included,
    when `</think>` never came or sampling was cut off."""

    async def step(self, action: list[int], *, extra: Any = None) -> StepResult:
        try:
            message, termination = self.renderer.parse_response(action)
        except RendererError:
            text, clean = "", False
        else:
            text, clean = renderers.get_text_content(message), termination.is_clean
        correct_format = float(extract_boxed(text) is not None and clean)
        correct_answer = float(answer_matches(text, self.answer))
        return self.scored(correct_answer, correct_format)
