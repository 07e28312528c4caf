"""The tiny local model: its vocabulary, loading contract, sampler and base-model quality."""

from __future__ import annotations

import json

import torch

from local_stack.client.dataset import all_problems, arithmetic_dataset
from local_stack.engine.model import (
    ADAPTER_CONFIG_PATH,
    BASE_MODEL_NAME,
    WEIGHTS_PATH,
    adapter_config_for,
    load_base_model,
)
from local_stack.engine.sampler import SamplingParams, sample_batch, sampling_logprobs
from local_stack.engine.vocab import UNK_COMPACT_ID, CompactVocab
from scripts.build_tiny_base import Problem, evaluate, prompt_tokens

IM_END, THINK, THINK_END = 163586, 163606, 163607
BASE_CHECK_PROBLEMS = 60  # per held-out split, 16 answers each


def test_vocab_covers_every_prompt_and_the_specials(renderer, base):
    _, vocab = base
    for row in all_problems():
        real = prompt_tokens(renderer, row["question"])
        assert UNK_COMPACT_ID not in vocab.to_compact(real)
        assert vocab.to_real(vocab.to_compact(real)) == real
    assert UNK_COMPACT_ID not in vocab.to_compact([IM_END, THINK, THINK_END])
    assert vocab.to_compact([7, 10**6]) == [UNK_COMPACT_ID, UNK_COMPACT_ID]


def test_vocab_saves_and_loads(tmp_path, base):
    _, vocab = base
    vocab.save(tmp_path / "vocab.json")
    assert CompactVocab.load(tmp_path / "vocab.json") == vocab


def test_load_base_model_gives_a_fresh_untied_fp32_model(base):
    model, vocab = base
    other, _ = load_base_model()
    assert other is not model and not other.training
    assert model.config.vocab_size == vocab.size
    assert not model.config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() != model.model.embed_tokens.weight.data_ptr()
    assert all(p.dtype == torch.float32 for p in model.parameters())
    with torch.no_grad():
        other.lm_head.weight.zero_()
    assert model.lm_head.weight.abs().sum() > 0
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    assert set(json.loads(ADAPTER_CONFIG_PATH.read_text())["target_modules"]) <= names
    assert WEIGHTS_PATH.stat().st_size <= 2 * 1024**2


def test_adapter_config_follows_the_course_config():
    course = json.loads(ADAPTER_CONFIG_PATH.read_text())
    config = adapter_config_for(8)
    assert config.r == 8 and config.lora_alpha == course["lora_alpha"]
    assert set(config.target_modules) == set(course["target_modules"])
    assert config.lora_dropout == 0.0
    assert config.base_model_name_or_path == BASE_MODEL_NAME


def _forward_logprobs(model, prompt: list[int], tokens: list[int]) -> torch.Tensor:
    """Log-probabilities of `tokens` after `prompt` from one plain forward pass."""
    with torch.no_grad():
        logits_TV = model(input_ids=torch.tensor([prompt + tokens])).logits[0]
    logp_TV = torch.log_softmax(logits_TV[len(prompt) - 1 : -1], dim=-1)
    return logp_TV.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)


def test_batched_sampling_reports_the_model_logprobs(renderer, base):
    """Left padding and the KV cache must not change a row's distribution."""
    model, vocab = base
    questions = ["What is 3 plus 4?", "Sara has 17 stickers and gives away 12. How many left?"]
    prompts = [vocab.to_compact(prompt_tokens(renderer, q)) for q in questions]
    stop = frozenset(vocab.to_compact([IM_END]))
    params = [SamplingParams(40, 1.0, 1.0, stop), SamplingParams(5, 1.0, 1.0, stop)]
    completions = sample_batch(model, prompts, params, torch.Generator().manual_seed(0))
    for prompt, done in zip(prompts, completions, strict=True):
        expected = _forward_logprobs(model, prompt, done.tokens)
        assert torch.allclose(torch.tensor(done.logprobs), expected, atol=1e-4)
    assert completions[1].stop_reason == "length" and len(completions[1].tokens) == 5


def test_a_rows_logprobs_depend_on_its_batch_in_the_last_digits(renderer, base):
    """Why two runs with the same seed drift apart (notebook 04, "Same seed, same numbers?"):
    decoded with other prompts, a prompt's greedy tokens are the same but their logprobs
    move in about the sixth digit, so a random draw near the edge between two tokens can
    turn out differently, whatever generator it comes from."""
    model, vocab = base
    questions = [row["question"] for row in arithmetic_dataset()["train"].select(range(12))]
    prompts = [vocab.to_compact(prompt_tokens(renderer, q)) for q in questions]
    greedy = SamplingParams(12, 0.0)
    alone = [sample_batch(model, [p], [greedy], torch.Generator())[0] for p in prompts]
    together = sample_batch(model, prompts, [greedy] * len(prompts), torch.Generator())
    assert [c.tokens for c in alone] == [c.tokens for c in together]
    gaps = [
        abs(a - b)
        for one, other in zip(alone, together, strict=True)
        for a, b in zip(one.logprobs, other.logprobs, strict=True)
    ]
    assert 0 < max(gaps) < 1e-4


def test_top_p_and_temperature_logprobs_are_the_sampling_distribution():
    logits_BV = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert torch.allclose(
        sampling_logprobs(logits_BV, 0.5, 1.0), torch.log_softmax(logits_BV * 2, -1)
    )
    nucleus = sampling_logprobs(logits_BV, 1.0, 0.9).exp()[0]
    probs = torch.softmax(logits_BV, -1)[0]
    assert nucleus[3] == 0 and torch.isclose(nucleus.sum(), torch.tensor(1.0))
    assert torch.allclose(nucleus[:3], probs[:3] / probs[:3].sum())


def test_base_model_knows_more_than_it_says(renderer, base):
    """Guards the warm-up: on problems whose facts it saw but RL never trains on, the base
    model is right about a third of the time at T=1 (room for RL to sharpen) and almost
    always within 16 tries; on facts it never saw, it is right less often. Deterministic:
    the sampler is seeded (SEED)."""
    model, vocab = base
    splits = arithmetic_dataset()
    known, unseen = (
        [Problem.from_row(r) for r in splits[name]][:BASE_CHECK_PROBLEMS]
        for name in ("held_out_known", "held_out")
    )
    on_known = evaluate(model, vocab, renderer, known, 16)
    assert 0.6 <= on_known["format"] <= 0.95
    assert 0.25 <= on_known["pass@1"] <= 0.45
    assert on_known["pass@16"] >= 0.8
    assert evaluate(model, vocab, renderer, unseen, 16)["pass@1"] < on_known["pass@1"]
