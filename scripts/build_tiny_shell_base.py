"""Build notebook 08's tiny shell policy: `python scripts/build_tiny_shell_base.py`.

A second base model for the local stack, served as `course/tiny-shell` beside the arithmetic
one (`local_stack.engine.model.BASE_MODEL_DIRS`). Its vocabulary is the real Kimi K2.6 ids of
the shell subset its prompts and replies use, and its prompts are exactly the ones
`shell_tasks.shell_env.ShellTaskEnv` sends for the task family of `shell_tasks.task_family`.

The warm-up is supervised, on replies in the `kimi_k26` renderer's format: after the
prompt's `<think>`, a short plan, `</think>`, one ```bash block, then `<|im_end|>`. Like a
pretrained model that knows the tools but not the task, it is deliberately unsure:
- for each kind of task the right command is only one of four it writes; the others are
  commands a person gets wrong (`sort` without `-n`, `head` for `tail`, `wc -l FILE`
  writing the name too, forgetting to redirect), each right for some other kind of task;
- now and then the answer goes to the wrong file name, or the format breaks (the block
  stays inside the thinking, or no block at all).
So held-out pass@1 starts low and RL has the right command to sharpen toward.
Deterministic: fixed seeds and one thread, so a rebuild reproduces the files bit for bit.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

from helpers.scoring import graded_text
from kimi import offline_kimi_renderer
from local_stack.engine.model import (
    ARCHITECTURE_FILE,
    BASE_MODEL_DIRS,
    SHELL_MODEL_NAME,
    VOCAB_PATH,
    WEIGHTS_PATH,
    load_base_model,
    new_model,
    tiny_llama_config,
)
from local_stack.engine.sampler import SamplingParams, sample_batch
from local_stack.engine.vocab import UNK_COMPACT_ID, CompactVocab
from local_stack.engine.warm_up import Example, supervised_warm_up
from shell_tasks import task_family
from shell_tasks.shell_env import extract_bash_script, task_messages
from shell_tasks.task_family import ShellInstance

SEED = 0
TORCH_THREADS = 1  # also fixes the reduction order, for a bit-for-bit rebuild
STEPS = 700
BATCH_SIZE = 32
TRAIN_INSTANCES = 4000  # training prompts the warm-up draws from
HELD_OUT_SAMPLES = 300
MAX_NEW_TOKENS = 48

MODEL_DIR = BASE_MODEL_DIRS[SHELL_MODEL_NAME]
PLANS = {
    "sum": "Add the numbers.",
    "max": "Find the largest.",
    "min": "Find the smallest.",
    "count_lines": "Count the lines.",
    "count_word": "Count the lines with the word.",
}
# Per kind: the right command first, then three mistakes (each the right one elsewhere,
# or a near miss). {i} input file, {o} output file, {w} the word.
COMMANDS = {
    "sum": (
        "awk '{{s+=$1}} END {{print s}}' {i} > {o}",
        "awk '{{s+=$1}} END {{print s}}' {i}",
        "wc -l < {i} > {o}",
        "sort -n {i} | tail -n 1 > {o}",
    ),
    "max": (
        "sort -n {i} | tail -n 1 > {o}",
        "sort -n {i} | head -n 1 > {o}",
        "sort {i} | tail -n 1 > {o}",
        "tail -n 1 {i} > {o}",
    ),
    "min": (
        "sort -n {i} | head -n 1 > {o}",
        "sort -n {i} | tail -n 1 > {o}",
        "sort {i} | head -n 1 > {o}",
        "head -n 1 {i} > {o}",
    ),
    "count_lines": (
        "wc -l < {i} > {o}",
        "wc -l {i} > {o}",
        "wc -c < {i} > {o}",
        "awk '{{s+=$1}} END {{print s}}' {i} > {o}",
    ),
    "count_word": (
        "grep -c {w} {i} > {o}",
        "grep {w} {i} > {o}",
        "wc -l < {i} > {o}",
        "grep -c {w} {i}",
    ),
}
P_RIGHT_COMMAND = 0.4  # the three mistakes share the rest equally
P_WRONG_OUTPUT_NAME = 0.1
# Reply styles and their shares; only "clean" has a block the grader reads.
STYLE_WEIGHTS = {"clean": 0.9, "block_in_thinking": 0.06, "no_block": 0.04}


def prompt_tokens(renderer: Any, item: ShellInstance) -> list[int]:
    """Real ids of the generation prompt, exactly as ShellTaskEnv builds it."""
    messages = task_messages(item.instruction, task_family.WORKDIR)
    return renderer.build_generation_prompt(messages).to_ints()


def reply_text(item: ShellInstance, command_index: int, output_name: str, style: str) -> str:
    """The assistant's text after the prompt's `<think>`."""
    command = COMMANDS[item.kind][command_index].format(
        i=item.input_name, o=output_name, w=item.word
    )
    block = f"```bash\n{command}\n```"
    plan = PLANS[item.kind]
    if style == "clean":
        return f"{plan}</think>{block}<|im_end|>"
    if style == "block_in_thinking":
        return f"{plan}\n{block}<|im_end|>"
    return f"{plan}</think>The answer goes in {output_name}.<|im_end|>"


def surface_forms() -> list[ShellInstance]:
    """One instance per distinct prompt and reply wording (kind, names, word)."""
    forms = []
    for kind in task_family.KINDS:
        for split in task_family.SPLITS:
            for source, target in task_family.NAME_PAIRS[split]:
                for word in task_family.WORDS if kind == "count_word" else (None,):
                    forms.append(ShellInstance(split, 0, kind, source, target, word, "", 0))
    return forms


def build_vocab(renderer: Any) -> CompactVocab:
    """Every real id the prompts and replies can use, plus the chat specials."""
    tok = renderer.tokenizer
    ids: set[int] = set()
    for item in surface_forms():
        ids.update(prompt_tokens(renderer, item))
        for command_index in range(len(COMMANDS[item.kind])):
            for output_name in task_family.OUTPUT_NAMES:
                for style in STYLE_WEIGHTS:
                    ids.update(tok.encode(reply_text(item, command_index, output_name, style)))
    specials = ["<|im_system|>", "<|im_user|>", "<|im_assistant|>", "<|im_middle|>"]
    specials += ["<|im_end|>", "<think>", "</think>"]
    ids.update(tok.encode("".join(specials)))
    ids.add(tok.eos_token_id)
    return CompactVocab(ids, tok.encode("<|reserved_token_16|>")[0])


def warmup_example(
    item: ShellInstance, prompt: list[int], vocab: CompactVocab, renderer: Any, rng: random.Random
) -> tuple[list[int], list[bool]]:
    """Compact ids of prompt + one deliberately unsure reply, and which positions train."""
    mistakes = len(COMMANDS[item.kind]) - 1
    command_index = 0 if rng.random() < P_RIGHT_COMMAND else 1 + rng.randrange(mistakes)
    output_name = item.output_name
    if rng.random() < P_WRONG_OUTPUT_NAME:
        output_name = rng.choice([n for n in task_family.OUTPUT_NAMES if n != output_name])
    style = rng.choices(list(STYLE_WEIGHTS), weights=list(STYLE_WEIGHTS.values()))[0]
    reply = renderer.tokenizer.encode(reply_text(item, command_index, output_name, style))
    compact = vocab.to_compact(prompt + reply)
    assert UNK_COMPACT_ID not in compact, "the vocabulary misses a warm-up token"
    return compact, [False] * len(prompt) + [True] * len(reply)


def warm_up(
    vocab: CompactVocab, renderer: Any, items: Sequence[ShellInstance], steps: int, batch: int
) -> torch.nn.Module:
    rng = random.Random(SEED)
    model = new_model(vocab.size, seed=SEED, name=SHELL_MODEL_NAME)
    prompts = [prompt_tokens(renderer, item) for item in items]

    def next_batch() -> list[Example]:
        picks = [rng.randrange(len(items)) for _ in range(batch)]
        return [warmup_example(items[i], prompts[i], vocab, renderer, rng) for i in picks]

    return supervised_warm_up(model, next_batch, steps)


def evaluate(
    model: torch.nn.Module, vocab: CompactVocab, renderer: Any, items: Sequence[ShellInstance]
) -> dict[str, float]:
    """One sample per instance at T=1: how often the graded block is the right command.

    The right command is a lower bound on pass@1 (a mistake can still land on the right
    number); `scripts/train_shell_policy.py` measures pass@1 itself, in sandboxes.
    """
    stop = frozenset(vocab.to_compact(renderer.get_stop_sequences()))
    params = [SamplingParams(MAX_NEW_TOKENS, 1.0, 1.0, stop)] * len(items)
    prompts = [vocab.to_compact(prompt_tokens(renderer, item)) for item in items]
    completions = sample_batch(model, prompts, params, torch.Generator().manual_seed(SEED))
    graded = right = 0
    for item, done in zip(items, completions, strict=True):
        answer = graded_text(renderer, vocab.to_real(done.tokens))
        script = None if answer is None else extract_bash_script(answer)
        graded += script is not None
        expected = COMMANDS[item.kind][0].format(i=item.input_name, o=item.output_name, w=item.word)
        right += script is not None and script.strip() == expected
    return {"has_block": graded / len(items), "right_command": right / len(items)}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument(
        "--output-dir",
        type=Path,
        default=MODEL_DIR,
        help="to compare a rebuild with the shipped files",
    )
    args = parser.parse_args()
    out = args.output_dir
    torch.set_num_threads(TORCH_THREADS)
    started = time.perf_counter()
    renderer = offline_kimi_renderer()
    vocab = build_vocab(renderer)
    print(f"vocab: {vocab.size} ids")
    train = task_family.instances("train", TRAIN_INSTANCES)
    model = warm_up(vocab, renderer, train, args.steps, args.batch_size)
    out.mkdir(parents=True, exist_ok=True)
    vocab.save(out / VOCAB_PATH.name)
    architecture = json.loads(tiny_llama_config(vocab.size).to_json_string())
    (out / ARCHITECTURE_FILE).write_text(json.dumps(architecture, indent=1, sort_keys=True))
    state = {name: t.detach().contiguous() for name, t in model.state_dict().items()}
    save_file(state, out / WEIGHTS_PATH.name)
    print(f"built in {time.perf_counter() - started:.1f} s")
    for name in (WEIGHTS_PATH.name, VOCAB_PATH.name, ARCHITECTURE_FILE):
        print(f"sha256 {sha256(out / name)}  {name}")
    if out != MODEL_DIR:
        return
    base, vocab = load_base_model(SHELL_MODEL_NAME)
    held_out = task_family.instances("held_out", HELD_OUT_SAMPLES)
    metrics = evaluate(base, vocab, renderer, held_out)
    print("held-out T=1: " + ", ".join(f"{k} {v:.3f}" for k, v in metrics.items()))


if __name__ == "__main__":
    main()
