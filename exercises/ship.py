"""Notebook 09's exercise: score the very tokens Sail sampled with the converted adapter, the
per-token logprobs that the parity check compares with Sail's and Tinker's."""

from __future__ import annotations

import torch

from exercises.check import Case, Exercise, Mistake


def _completion_logprobs(
    logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int
) -> torch.Tensor:
    return _shifted(torch.log_softmax(logits_TV, dim=-1), tokens_T, prompt_length)


def _shifted(scores_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int) -> torch.Tensor:
    """Each completion token's entry in `scores_TV`: the row at position t scores token t + 1."""
    return scores_TV[prompt_length - 1 : -1].gather(-1, tokens_T[prompt_length:, None]).squeeze(-1)


def _tiny_model_logits(tokens_T: torch.Tensor) -> torch.Tensor:
    """The local stack's tiny model's logits for `tokens_T` (compact ids): a real model, a
    fraction of a second on a CPU."""
    from helpers.backend import tiny_base_model

    model, _ = tiny_base_model()
    with torch.no_grad():
        return model(input_ids=tokens_T[None]).logits[0].float()


def _logprob_cases() -> list[Case]:
    generator = torch.Generator().manual_seed(8)
    random_logits_TV = torch.randn(6, 5, generator=generator) * 2
    tokens_T = torch.tensor([196, 17, 42, 5, 99, 130, 61])
    return [
        Case(
            "random logits: 6 tokens of a 5-token vocabulary, a prompt of 3",
            (random_logits_TV, torch.tensor([0, 3, 1, 4, 2, 2]), 3),
        ),
        Case(
            "the tiny local model: 7 tokens, a prompt of 4",
            (_tiny_model_logits(tokens_T), tokens_T, 4),
        ),
        Case(
            "a one-token prompt and a five-token completion",
            (random_logits_TV, torch.tensor([2, 0, 4, 4, 1, 3]), 1),
        ),
    ]


def _not_shifted(logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int):
    logprobs_TV = torch.log_softmax(logits_TV, dim=-1)
    return logprobs_TV[prompt_length:].gather(-1, tokens_T[prompt_length:, None]).squeeze(-1)


def _prompt_included(logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int):
    logprobs_TV = torch.log_softmax(logits_TV, dim=-1)
    return logprobs_TV[:-1].gather(-1, tokens_T[1:, None]).squeeze(-1)


def _probabilities(logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int):
    return _completion_logprobs(logits_TV, tokens_T, prompt_length).exp()


def _raw_logits(logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int):
    return _shifted(logits_TV, tokens_T, prompt_length)


def _as_list(logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int):
    return _completion_logprobs(logits_TV, tokens_T, prompt_length).tolist()


def _last_axis_kept(logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int):
    return _completion_logprobs(logits_TV, tokens_T, prompt_length)[:, None]


def _normalised_over_positions(logits_TV: torch.Tensor, tokens_T: torch.Tensor, prompt_length: int):
    return _shifted(torch.log_softmax(logits_TV, dim=0), tokens_T, prompt_length)


COMPLETION_LOGPROBS = Exercise(
    name="completion_logprobs",
    notebook="09_ship_the_adapter",
    minutes=10,
    reference=_completion_logprobs,
    cases=_logprob_cases,
    mistakes=[
        Mistake(
            "targets not shifted by one",
            "you scored each token with the logits at its own position. A causal model's "
            "logits at position t predict the token at t + 1, so the completion's tokens "
            "tokens_T[prompt_length:] are scored by logits_TV[prompt_length - 1 : -1].",
            _not_shifted,
        ),
        Mistake(
            "the prompt's positions included",
            "you returned a logprob for every token after the first, the prompt's included. "
            "Sail reports logprobs only for the tokens it sampled: keep the completion's "
            "positions, tokens_T[prompt_length:] scored by logits_TV[prompt_length - 1 : -1].",
            _prompt_included,
        ),
        Mistake(
            "probabilities instead of logprobs",
            "you returned probabilities (softmax, or exp of the logprobs). Sail and Tinker "
            "report natural-log probabilities: use torch.log_softmax and do not exponentiate.",
            _probabilities,
        ),
        Mistake(
            "raw logits, not normalised",
            "you returned the raw logits of the tokens. A logit becomes a logprob only after "
            "subtracting the log-sum-exp over the vocabulary: torch.log_softmax(logits_TV, "
            "dim=-1).",
            _raw_logits,
        ),
        Mistake(
            "normalised over positions, not the vocabulary",
            "you normalised over positions (dim=0). Each position's distribution is over the "
            "vocabulary, the last axis of logits_TV: torch.log_softmax(logits_TV, dim=-1).",
            _normalised_over_positions,
        ),
        Mistake(
            "the gathered axis kept",
            "your numbers are right, but their shape is (C, 1): gather keeps the axis it "
            "gathered along. Drop it with .squeeze(-1), for one logprob per completion token.",
            _last_axis_kept,
        ),
        Mistake(
            "a list instead of a tensor",
            "your numbers are right, but you returned a Python list. Return the torch.Tensor "
            "itself (leave out .tolist()): the scorer below calls .tolist() on it.",
            _as_list,
        ),
    ],
)
