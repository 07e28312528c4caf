"""The local sampler's rules (local_stack/engine/sampler.py), in-process on a made-up model:
the distribution a token is drawn from (temperature, top-p nucleus), the logprob reported
for it, left padding and positions, and when each row of a batch stops."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import transformers

from local_stack.engine.model import tiny_llama_config
from local_stack.engine.sampler import PAD_ID, SamplingParams, sample_batch, sampling_logprobs

VOCAB = 8


def test_temperature_divides_the_logits_and_zero_means_the_models_own():
    logits_BV = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.5, 0.5, 3.0, 0.0]])
    for temperature, divisor in ((1.0, 1.0), (0.5, 0.5), (2.0, 2.0), (0.0, 1.0)):
        expected = torch.log_softmax(logits_BV / divisor, dim=-1)
        got = sampling_logprobs(logits_BV, temperature, top_p=1.0)
        torch.testing.assert_close(got, expected)


def test_top_p_keeps_the_smallest_nucleus_and_renormalises_it():
    # Probabilities 0.15, 0.5, 0.05, 0.3, deliberately not in order.
    probs = torch.tensor([[0.15, 0.5, 0.05, 0.3]])
    logits_BV = probs.log()
    cases = {
        1.0: [0.15, 0.5, 0.05, 0.3],
        0.96: [0.15, 0.5, 0.05, 0.3],  # 0.95 is not yet 0.96: the last token stays
        0.9: [0.15 / 0.95, 0.5 / 0.95, 0.0, 0.3 / 0.95],
        0.75: [0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8],  # 0.5 + 0.3 covers 0.75
        0.6: [0.0, 0.5 / 0.8, 0.0, 0.3 / 0.8],
        0.45: [0.0, 1.0, 0.0, 0.0],
        0.1: [0.0, 1.0, 0.0, 0.0],  # the most likely token is always kept
    }
    for top_p, expected in cases.items():
        got = sampling_logprobs(logits_BV, 1.0, top_p).exp()
        torch.testing.assert_close(got, torch.tensor([expected]), atol=1e-6, rtol=1e-5)


def test_top_p_applies_per_row_after_the_temperature():
    logits_BV = torch.tensor([[3.0, 1.0, 0.0, -3.0], [0.0, 0.0, 0.0, 0.0]])
    got = sampling_logprobs(logits_BV, 2.0, 0.85)
    tempered = torch.softmax(logits_BV / 2.0, dim=-1)
    # At T = 2 the first two tokens hold 0.83 of the mass, at T = 1 already 0.95.
    assert float(tempered[0, :2].sum()) < 0.85 < float(tempered[0, :3].sum())
    kept = tempered[0, :3] / tempered[0, :3].sum()
    torch.testing.assert_close(got[0, :3].exp(), kept)
    assert got[0, 3] == -math.inf
    # Equal logits: four tokens of 0.25, of which the first three reach 0.75, not 0.85.
    assert (got[1].exp() > 0).sum() == 4
    torch.testing.assert_close(got[1].exp().sum(), torch.tensor(1.0))


class NextTokenModel(torch.nn.Module):
    """A made-up causal model: after token t it puts `peak` logits on (t + 1) % VOCAB and
    `second` on (t + 2) % VOCAB. It records what each call was given."""

    def __init__(self, peak: float = 20.0, second: float = 0.0) -> None:
        super().__init__()
        self.peak, self.second = peak, second
        self.calls: list[dict] = []

    def forward(
        self, input_ids, attention_mask, position_ids, past_key_values, use_cache, logits_to_keep
    ):
        assert use_cache and logits_to_keep == 1 and past_key_values is not None
        self.calls.append(
            {
                "input_ids": input_ids.tolist(),
                "mask": attention_mask.tolist(),
                "positions": position_ids.tolist(),
            }
        )
        last_B = input_ids[:, -1]
        logits_BV = torch.zeros((len(last_B), VOCAB))
        logits_BV[torch.arange(len(last_B)), (last_B + 1) % VOCAB] = self.peak
        logits_BV[torch.arange(len(last_B)), (last_B + 2) % VOCAB] += self.second
        return SimpleNamespace(logits=logits_BV[:, None, :])


def greedy(max_new_tokens: int, stop_ids=()) -> SamplingParams:
    return SamplingParams(max_new_tokens, temperature=0.0, stop_ids=frozenset(stop_ids))


def test_prompts_are_left_padded_with_positions_counting_real_tokens():
    model = NextTokenModel()
    sample_batch(model, [[3], [1, 2, 4]], [greedy(2), greedy(2)], torch.Generator())
    first, second = model.calls
    assert first["input_ids"] == [[PAD_ID, PAD_ID, 3], [1, 2, 4]]
    assert first["mask"] == [[0, 0, 1], [1, 1, 1]]
    assert first["positions"] == [[0, 0, 0], [0, 1, 2]]
    # Then one new token per row, its mask one longer and its position one further.
    assert second["input_ids"] == [[4], [5]]
    assert second["mask"] == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert second["positions"] == [[1], [3]]


def test_each_row_stops_at_its_budget_or_its_stop_token():
    model = NextTokenModel()
    prompts = [[1], [1], [2], [5]]
    params = [greedy(3), greedy(5, stop_ids={4}), greedy(0), greedy(1, stop_ids={6})]
    done = sample_batch(model, prompts, params, torch.Generator())
    assert [c.tokens for c in done] == [[2, 3, 4], [2, 3, 4], [], [6]]
    assert [c.stop_reason for c in done] == ["length", "stop", "length", "stop"]
    # A greedy token is the model's own choice, reported with its T = 1 logprob.
    expected = -math.log1p((VOCAB - 1) * math.exp(-20.0))
    assert all(lp == pytest.approx(expected, abs=1e-7) for c in done for lp in c.logprobs)
    # The zero-budget row is never run; a finished row leaves the batch.
    assert [len(call["input_ids"]) for call in model.calls] == [3, 2, 2]
    assert model.calls[1]["input_ids"] == [[2], [2]] and model.calls[2]["input_ids"] == [[3], [3]]


def test_a_row_that_finishes_early_leaves_the_others_going():
    model = NextTokenModel()
    done = sample_batch(
        model, [[0], [0], [0]], [greedy(1), greedy(3), greedy(2)], torch.Generator()
    )
    assert [c.tokens for c in done] == [[1], [1, 2, 3], [1, 2]]
    assert [len(call["input_ids"]) for call in model.calls] == [3, 2, 1]
    assert model.calls[1]["mask"] == [[1, 1], [1, 1]]


def test_sampled_tokens_follow_the_distribution_and_report_its_logprob():
    # Token t + 1 with probability e^2 / (e^2 + 1 + 6 e^0) ... (peak 2, second +1.5).
    model = NextTokenModel(peak=2.0, second=1.5)
    params = [SamplingParams(1, temperature=1.0), SamplingParams(1, temperature=0.5, top_p=0.9)]
    generator = torch.Generator().manual_seed(0)
    draws = [sample_batch(model, [[0], [0]], params, generator) for _ in range(300)]
    logits_V = model(
        torch.tensor([[0]]), torch.ones((1, 1)), torch.zeros((1, 1)), object(), True, 1
    ).logits[0, -1]
    for row, p in enumerate(params):
        logp_V = sampling_logprobs(logits_V[None], p.temperature, p.top_p)[0]
        tokens = [d[row].tokens[0] for d in draws]
        for d in draws:
            assert d[row].logprobs[0] == pytest.approx(float(logp_V[d[row].tokens[0]]), abs=1e-6)
        share = tokens.count(1) / len(tokens)
        assert share == pytest.approx(float(logp_V[1].exp()), abs=0.1)
        assert set(tokens) <= {t for t in range(VOCAB) if logp_V[t] > -math.inf}
    # Row 1's nucleus at T = 0.5 holds tokens 1 and 2 only; row 0 draws beyond them too.
    assert {d[1].tokens[0] for d in draws} == {1, 2}
    assert {d[0].tokens[0] for d in draws} - {1, 2}
    # The same generator seed gives the same draws.
    again = sample_batch(model, [[0], [0]], params, torch.Generator().manual_seed(0))
    assert [c.tokens for c in again] == [c.tokens for c in draws[0]]


def test_top_p_one_keeps_every_token_however_unlikely():
    # A token of probability 1e-12 is still drawable at top_p = 1: no nucleus is cut.
    logits_BV = torch.tensor([[0.0, -27.6, 1.0, 0.5]])
    got = sampling_logprobs(logits_BV, 1.0, 1.0)
    torch.testing.assert_close(got, torch.log_softmax(logits_BV, dim=-1))
    assert got[0, 1] > -math.inf


def test_top_p_drops_a_token_once_the_mass_before_it_reaches_top_p_exactly():
    # Probabilities exact in binary: the first two tokens hold exactly 0.75.
    logits_BV = torch.tensor([[0.5, 0.25, 0.125, 0.125]]).log()
    got = sampling_logprobs(logits_BV, 1.0, 0.75).exp()
    torch.testing.assert_close(got, torch.tensor([[2 / 3, 1 / 3, 0.0, 0.0]]))


def test_greedy_takes_the_most_likely_token_even_when_it_is_unlikely():
    # Token 1 gets probability 0.28 only, the other seven share the rest: sampling would
    # mostly draw another one, greedy never does.
    model = NextTokenModel(peak=1.0)
    done = sample_batch(model, [[0]] * 64, [greedy(1)] * 64, torch.Generator().manual_seed(0))
    assert {c.tokens[0] for c in done} == {1}
    expected = 1.0 - math.log(math.e + VOCAB - 1)
    assert all(c.logprobs[0] == pytest.approx(expected, abs=1e-6) for c in done)


def test_rows_with_the_same_params_draw_each_their_own_token():
    model = NextTokenModel(peak=1.0)
    params = [SamplingParams(1, temperature=1.0)] * 64
    done = sample_batch(model, [[0]] * 64, params, torch.Generator().manual_seed(0))
    logp_V = torch.log_softmax(torch.tensor([0.0, 1.0, *[0.0] * (VOCAB - 2)]), dim=-1)
    assert len({c.tokens[0] for c in done}) > 1
    for c in done:
        assert c.logprobs[0] == pytest.approx(float(logp_V[c.tokens[0]]), abs=1e-6)


def test_the_draws_depend_on_the_generator_only():
    model = NextTokenModel(peak=1.0)
    params = [SamplingParams(8, temperature=1.0)] * 16

    def draw(generator_seed: int, global_seed: int) -> list[list[int]]:
        torch.manual_seed(global_seed)
        generator = torch.Generator().manual_seed(generator_seed)
        return [c.tokens for c in sample_batch(model, [[0]] * 16, params, generator)]

    assert draw(0, global_seed=1) == draw(0, global_seed=2)
    assert draw(0, global_seed=1) != draw(1, global_seed=1)


def test_a_batch_of_zero_budgets_runs_nothing():
    model = NextTokenModel()
    done = sample_batch(model, [[1], [2, 3]], [greedy(0), greedy(0)], torch.Generator())
    assert [(c.tokens, c.stop_reason) for c in done] == [([], "length"), ([], "length")]
    assert model.calls == []


def test_a_batch_on_a_real_model_decodes_what_each_prompt_decodes_alone():
    # A random two-layer Llama of the stack's architecture, with its KV cache: left padding,
    # masks, positions and dropping finished rows from the cache change no row's tokens or
    # logprobs. The reference recomputes each sequence whole, without a cache.
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(tiny_llama_config(vocab_size=32)).eval()
    prompts = [[5], [3, 9, 2, 7], [1, 4], [30, 8, 8]]
    params = [greedy(6), greedy(2), greedy(5, stop_ids={99}), greedy(1)]
    done = sample_batch(model, prompts, params, torch.Generator())
    for prompt, p, completion in zip(prompts, params, done, strict=True):
        tokens, logprobs = list(prompt), []
        with torch.no_grad():
            for _ in range(p.max_new_tokens):
                logp_V = torch.log_softmax(model(torch.tensor([tokens])).logits[0, -1], dim=-1)
                tokens.append(int(logp_V.argmax()))
                logprobs.append(float(logp_V.max()))
        assert completion.tokens == tokens[len(prompt) :]
        assert completion.logprobs == pytest.approx(logprobs, abs=1e-5)
