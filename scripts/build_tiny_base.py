"""Build the local stack's tiny model: `python scripts/build_tiny_base.py`.

A build step, not part of the running stack: the vocabulary and base weights it writes to
`local_stack/engine/base_model/` ship with the course. It lives with the course, not in the
stack, because it teaches the model the course's task: its prompts are built as notebook
01's `MathEnv` builds them, and it scores the result with notebook 01's answer check.

The base model is a short supervised warm-up, standing in for pretraining: it sees the
facts of the local arithmetic set's train split and of its `held_out_known` split (facts RL
never trains on), and never those of `held_out` (facts nothing ever shows it). It is written
in the `kimi_k26` renderer's format: after the prompt's `<think>`,
`{a} + {b} = {c}</think>The answer is \\boxed{c}.<|im_end|>` (the closing varies a little).
Writing the operands first puts them next to the result, where a tiny model can add them.
Like a pretrained model, it knows more than it says: its data are noisy, so it learns to
answer with spread-out probability, right often but far from always, and RL has something
to sharpen:
- result labels are noisy (right half the time, otherwise off by 1, 2 or 10), so the right
  result is the most likely one, but sampled at T=1 it is often a neighbour: this is the
  spread RL sharpens;
- a tenth of the completions write the wrong operation (a sum as a difference or the
  reverse), a choice RL can learn from the question's wording;
- a tenth break the format (no box, no `</think>`, or rambling on with no stop token), so
  format alone leaves RL little to gain.
A quarter of each batch are "drills": bare equations packed together, which teach the
arithmetic far faster per step than full prompts do.
It prints, for each held-out split, the format rate and pass@1 and pass@16 (16 answers at
T=1 to every problem, graded as `MathEnv` grades them), so a rebuild shows whether the base
model still knows more than it says on `held_out_known`.
Deterministic: fixed seeds and one thread, so a rebuild reproduces the files bit for bit.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import re
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from helpers.scoring import QUESTION_SUFFIX, answer_matches, extract_boxed, graded_text
from helpers.training import pass_at_k
from kimi import offline_kimi_renderer
from local_stack.client.dataset import all_problems, arithmetic_dataset
from local_stack.engine.model import (
    BASE_MODEL_DIR,
    VOCAB_PATH,
    WEIGHTS_PATH,
    load_base_model,
    new_model,
)
from local_stack.engine.sampler import SamplingParams, sample_batch
from local_stack.engine.vocab import UNK_COMPACT_ID, CompactVocab
from local_stack.engine.warm_up import Example, supervised_warm_up

SEED = 0
# One thread: with anything else running on the two cores, two threads ran 5-10x slower
# (they spin against each other); one thread also fixes the reduction order.
TORCH_THREADS = 1
STEPS = 600
BATCH_SIZE = 48
DRILL_SHARE = 0.25  # of each batch
DRILL_EQUATIONS = 8  # per drill sequence, about as long as a full example

EQUATION = re.compile(r"(\d+) ([+-]) (\d+) = (\d+)")
CLOSINGS = ("The answer is \\boxed{{{c}}}.", "So the answer is \\boxed{{{c}}}.", "\\boxed{{{c}}}")
P_CORRECT_LABEL = 0.5
# Share of completions that write the wrong operation (a sum as a difference, or the
# reverse): a choice RL can learn to get right from the question's wording.
P_WRONG_OPERATION = 0.1
# Off-by amounts for a wrong label, and their relative weights.
LABEL_NOISE = {-1: 3, 1: 3, -2: 2, 2: 2, -10: 1, 10: 1}
# Completion styles and their shares in the warm-up data; only "clean" is well formatted.
STYLE_WEIGHTS = {"clean": 0.9, "no_box": 0.04, "no_think_close": 0.03, "ramble": 0.03}
NUMBER_RANGE = range(-40, 100)  # numbers the vocabulary must hold (noisy results included)
EVAL_SAMPLES = 16  # per held-out problem, for pass@1 and pass@16


def prompt_tokens(renderer: Any, question: str) -> list[int]:
    """Real ids of the generation prompt for one question, exactly as MathEnv builds it."""
    convo = [{"role": "user", "content": question + QUESTION_SUFFIX}]
    return renderer.build_generation_prompt(convo).to_ints()


@dataclass(frozen=True)
class Equation:
    """`a op b`, as the completion writes it before its result."""

    a: int
    op: str
    b: int

    @property
    def result(self) -> int:
        return self.a + self.b if self.op == "+" else self.a - self.b

    def with_other_operation(self) -> Equation:
        return Equation(self.a, "-" if self.op == "+" else "+", self.b)


@dataclass(frozen=True)
class Problem:
    """A row of the arithmetic set with its equation pulled out of the worked solution."""

    question: str
    answer: str
    equation: Equation

    @classmethod
    def from_row(cls, row: dict[str, str]) -> Problem:
        a, op, b, _ = EQUATION.search(row["answer"]).groups()
        return cls(row["question"], row["answer"], Equation(int(a), op, int(b)))


def completion_text(eq: Equation, shown: int, style: str, closing: str, repeats: int) -> str:
    """The assistant's text after the prompt's `<think>`, in one of the warm-up styles."""
    equation = f"{eq.a} {eq.op} {eq.b} = {shown}"
    boxed = closing.format(c=shown)
    if style == "clean":
        return f"{equation}</think>{boxed}<|im_end|>"
    if style == "no_box":
        return f"{equation}</think>The answer is {shown}.<|im_end|>"
    if style == "no_think_close":
        return f"{equation}. {boxed}<|im_end|>"
    return f"{equation}</think>" + " ".join([boxed] * repeats)  # ramble: never stops


def drill_pieces(eq: Equation, shown: int) -> list[tuple[str, bool]]:
    """One drill equation as (text, is_result) pieces: only the result is trained."""
    return [(f"{eq.a} {eq.op} {eq.b} =", False), (f" {shown}", True), (". ", False)]


def build_vocab(renderer: Any) -> CompactVocab:
    """Every real id the prompts, worked solutions and completions can use, plus chat specials."""
    tok = renderer.tokenizer
    ids: set[int] = set()
    for row in all_problems():
        ids.update(prompt_tokens(renderer, row["question"]))
        ids.update(tok.encode(row["answer"]))
    for n in NUMBER_RANGE:
        for op in "+-":
            eq = Equation(abs(n), op, abs(n))
            for style in STYLE_WEIGHTS:
                for closing in CLOSINGS:
                    ids.update(tok.encode(completion_text(eq, n, style, closing, 2)))
            for text, _ in drill_pieces(eq, n):
                ids.update(tok.encode(text))
    specials = ["<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>"]
    specials += ["<|im_end|>", "<think>", "</think>"]
    ids.update(tok.encode("".join(specials)))
    ids.add(tok.eos_token_id)
    unk_real_id = tok.encode("<|reserved_token_16|>")[0]
    return CompactVocab(ids, unk_real_id)


def noisy_label(c: int, rng: random.Random) -> int:
    """The right result with probability P_CORRECT_LABEL, else a nearby wrong one."""
    if rng.random() < P_CORRECT_LABEL:
        return c
    return c + rng.choices(list(LABEL_NOISE), weights=list(LABEL_NOISE.values()))[0]


def warmup_example(
    p: Problem, prompt: list[int], vocab: CompactVocab, renderer: Any, rng: random.Random
) -> tuple[list[int], list[bool]]:
    """Compact ids of prompt + one noisy completion, and which positions are trained."""
    eq = p.equation
    if rng.random() < P_WRONG_OPERATION:
        eq = eq.with_other_operation()
    style = rng.choices(list(STYLE_WEIGHTS), weights=list(STYLE_WEIGHTS.values()))[0]
    shown = noisy_label(eq.result, rng)
    text = completion_text(eq, shown, style, rng.choice(CLOSINGS), rng.randint(2, 4))
    completion = renderer.tokenizer.encode(text)
    return _compact(vocab, prompt + completion), [False] * len(prompt) + [True] * len(completion)


def drill_example(
    problems: Sequence[Problem], vocab: CompactVocab, renderer: Any, rng: random.Random
) -> tuple[list[int], list[bool]]:
    """Many bare equations in one short sequence, trained on their (noisy) results only.

    A full example teaches one result per ~70 tokens, mostly prompt; a drill teaches one per
    9 tokens, so the arithmetic is learnt in far fewer steps. The equations are the training
    problems', with the operation swapped as often as completions swap it.
    """
    ids: list[int] = []
    trained: list[bool] = []
    for _ in range(DRILL_EQUATIONS):
        eq = problems[rng.randrange(len(problems))].equation
        if rng.random() < P_WRONG_OPERATION:
            eq = eq.with_other_operation()
        for text, is_result in drill_pieces(eq, noisy_label(eq.result, rng)):
            piece = renderer.tokenizer.encode(text)
            ids += piece
            trained += [is_result] * len(piece)
    return _compact(vocab, ids), trained


def _compact(vocab: CompactVocab, real_ids: list[int]) -> list[int]:
    compact = vocab.to_compact(real_ids)
    assert UNK_COMPACT_ID not in compact, "the vocabulary misses a warm-up token"
    return compact


def warm_up(
    vocab: CompactVocab, renderer: Any, problems: Sequence[Problem], steps: int, batch_size: int
) -> torch.nn.Module:
    """Supervised next-token training: full examples teach the format, drills the arithmetic."""
    rng = random.Random(SEED)
    model = new_model(vocab.size, seed=SEED)
    prompts = [prompt_tokens(renderer, p.question) for p in problems]
    drills = int(batch_size * DRILL_SHARE)

    def next_batch() -> list[Example]:
        picks = [rng.randrange(len(problems)) for _ in range(batch_size - drills)]
        batch = [warmup_example(problems[i], prompts[i], vocab, renderer, rng) for i in picks]
        return batch + [drill_example(problems, vocab, renderer, rng) for _ in range(drills)]

    return supervised_warm_up(model, next_batch, steps)


def evaluate(
    model: torch.nn.Module,
    vocab: CompactVocab,
    renderer: Any,
    problems: Sequence[Problem],
    samples_per_problem: int,
    seed: int = SEED,
    max_new_tokens: int = 64,
) -> dict[str, float]:
    """Sample `samples_per_problem` completions per problem at T=1 and score them as the
    course's grader does (`MathEnv`): only the text after a closed `</think>`, in a
    completion that stopped cleanly, can be well formed and correct. Returns the format
    rate and pass@k for k = 1 and k = `samples_per_problem` (unbiased, averaged over
    problems)."""
    stop = frozenset(vocab.to_compact(renderer.get_stop_sequences()))
    params = [SamplingParams(max_new_tokens, 1.0, 1.0, stop)] * len(problems)
    prompts = [vocab.to_compact(prompt_tokens(renderer, p.question)) for p in problems]
    generator = torch.Generator().manual_seed(seed)
    right_P = [0] * len(problems)
    formatted = 0
    for _ in range(samples_per_problem):
        completions = sample_batch(model, prompts, params, generator)
        for index, (p, done) in enumerate(zip(problems, completions, strict=True)):
            answer = graded_text(renderer, vocab.to_real(done.tokens))
            formatted += answer is not None and extract_boxed(answer) is not None
            right_P[index] += answer is not None and answer_matches(answer, p.answer)
    n = samples_per_problem
    return {
        "format": formatted / (n * len(problems)),
        "pass@1": statistics.mean(pass_at_k(n, c, 1) for c in right_P),
        f"pass@{n}": statistics.mean(pass_at_k(n, c, n) for c in right_P),
    }


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    args = parser.parse_args()
    torch.set_num_threads(TORCH_THREADS)
    started = time.perf_counter()
    renderer = offline_kimi_renderer()
    splits = {
        name: [Problem.from_row(r) for r in rows] for name, rows in arithmetic_dataset().items()
    }
    vocab = build_vocab(renderer)
    print(f"vocab: {vocab.size} ids")
    # The warm-up sees the facts RL trains on and those of `held_out_known`; never `held_out`.
    model = warm_up(
        vocab, renderer, splits["train"] + splits["held_out_known"], args.steps, args.batch_size
    )
    BASE_MODEL_DIR.mkdir(parents=True, exist_ok=True)
    vocab.save(VOCAB_PATH)
    state = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    save_file(state, WEIGHTS_PATH)
    seconds = time.perf_counter() - started
    parameters = sum(t.numel() for t in state.values())
    megabytes = WEIGHTS_PATH.stat().st_size / 1e6
    print(f"built in {seconds:.1f} s; {parameters} parameters, {megabytes:.2f} MB (fp32)")
    for path in (WEIGHTS_PATH, VOCAB_PATH):
        print(f"sha256 {sha256(path)}  {path.name}")

    base, vocab = load_base_model()
    for name in ("held_out_known", "held_out_seen", "held_out"):
        metrics = evaluate(base, vocab, renderer, splits[name], EVAL_SAMPLES)
        print(
            f"{name} ({len(splits[name])} problems, T=1): "
            + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items())
        )


if __name__ == "__main__":
    main()
