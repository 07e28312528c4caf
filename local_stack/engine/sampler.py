"""Batched sampling from the tiny model, on compact token ids.

The server translates real Kimi ids at its edges; here everything is compact. One call
decodes a whole batch with a KV cache: prompts are left-padded so every row's next token
sits in the last column, and rows that finish are dropped from the cache so the batch
shrinks as it goes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache, PreTrainedModel

PAD_ID = 0


@dataclass(frozen=True)
class SamplingParams:
    """What one request asks for. `temperature` 0 means greedy."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_ids: frozenset[int] = field(default_factory=frozenset)


@dataclass
class Completion:
    """Sampled compact ids, each one's log-probability, and why sampling ended."""

    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    stop_reason: str = "length"


def sampling_logprobs(logits_BV: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """Log-probabilities of the distribution a token is drawn from.

    That is log_softmax(logits / T), renormalised over the top-p nucleus when top_p < 1,
    so the logprob reported for a sampled token is exactly the one it was drawn with.
    Greedy (T = 0) reports the model's own (T = 1) distribution.
    """
    logp_BV = torch.log_softmax(logits_BV / (temperature if temperature > 0 else 1.0), dim=-1)
    if top_p >= 1.0:
        return logp_BV
    sorted_BV, order_BV = logp_BV.sort(dim=-1, descending=True)
    mass_before_BV = sorted_BV.exp().cumsum(dim=-1) - sorted_BV.exp()
    # A token is dropped once the more likely tokens already cover top_p of the mass.
    dropped_sorted_BV = mass_before_BV >= top_p
    dropped_BV = torch.empty_like(dropped_sorted_BV).scatter_(-1, order_BV, dropped_sorted_BV)
    kept_BV = logp_BV.masked_fill(dropped_BV, float("-inf"))
    return kept_BV - torch.logsumexp(kept_BV, dim=-1, keepdim=True)


def _choose(
    logits_BV: torch.Tensor, params: Sequence[SamplingParams], generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row, drawn with that row's temperature and top-p, and its logprob."""
    tokens_B = torch.empty(len(params), dtype=torch.long)
    logprobs_B = torch.empty(len(params))
    groups: dict[tuple[float, float], list[int]] = {}
    for row, p in enumerate(params):
        groups.setdefault((p.temperature, p.top_p), []).append(row)
    for (temperature, top_p), rows in groups.items():
        rows_R = torch.tensor(rows)
        logp_RV = sampling_logprobs(logits_BV[rows_R], temperature, top_p)
        if temperature > 0:
            chosen_R = torch.multinomial(logp_RV.exp(), 1, generator=generator).squeeze(-1)
        else:
            chosen_R = logp_RV.argmax(dim=-1)
        tokens_B[rows_R] = chosen_R
        logprobs_B[rows_R] = logp_RV.gather(-1, chosen_R[:, None]).squeeze(-1)
    return tokens_B, logprobs_B


def sample_batch(
    model: PreTrainedModel,
    prompts: Sequence[Sequence[int]],
    params: Sequence[SamplingParams],
    generator: torch.Generator,
) -> list[Completion]:
    """Decode every prompt together; each row stops at its stop ids or its token budget."""
    with torch.inference_mode():  # a block, not a decorator: `make mutants` skips decorated code
        completions = [Completion() for _ in prompts]
        longest = max(len(p) for p in prompts)
        input_ids_BT = torch.full((len(prompts), longest), PAD_ID, dtype=torch.long)
        mask_BT = torch.zeros((len(prompts), longest), dtype=torch.long)
        for row, prompt in enumerate(prompts):
            input_ids_BT[row, longest - len(prompt) :] = torch.tensor(prompt)
            mask_BT[row, longest - len(prompt) :] = 1
        positions_BT = (mask_BT.cumsum(-1) - 1).clamp(min=0)
        live = [row for row, p in enumerate(params) if p.max_new_tokens > 0]
        if len(live) < len(prompts):
            keep = torch.tensor(live, dtype=torch.long)
            input_ids_BT, mask_BT, positions_BT = (
                input_ids_BT[keep],
                mask_BT[keep],
                positions_BT[keep],
            )
        cache = DynamicCache()
        while live:
            out = model(
                input_ids=input_ids_BT,
                attention_mask=mask_BT,
                position_ids=positions_BT,
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
            live_params = [params[row] for row in live]
            tokens_B, logprobs_B = _choose(out.logits[:, -1].float(), live_params, generator)
            still: list[int] = []
            for i, row in enumerate(live):
                token = int(tokens_B[i])
                done = completions[row]
                done.tokens.append(token)
                done.logprobs.append(float(logprobs_B[i]))
                if token in params[row].stop_ids:
                    done.stop_reason = "stop"
                elif len(done.tokens) < params[row].max_new_tokens:
                    still.append(i)
            if not still:
                break
            keep_B = torch.tensor(still, dtype=torch.long)
            if len(still) < len(live):
                cache.batch_select_indices(keep_B)
            live = [live[i] for i in still]
            input_ids_BT = tokens_B[keep_B, None]
            mask_BT = torch.cat(
                [mask_BT[keep_B], torch.ones((len(still), 1), dtype=torch.long)], -1
            )
            positions_BT = positions_BT[keep_B, -1:] + 1
        return completions
