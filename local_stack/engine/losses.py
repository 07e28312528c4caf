"""Tinker's built-in losses as formulas over one datum's tokens (`_T`: a tensor over its
target positions), each a sum, never a mean, as Tinker's loss documentation defines them.
`trainer.LOSS_FNS` says which inputs each reads and its `loss_fn_config` defaults.
"""

from __future__ import annotations

import torch


def cross_entropy_loss(logprobs_T: torch.Tensor, weights_T: torch.Tensor) -> torch.Tensor:
    """Supervised loss: the weighted negative log-likelihood of the targets, summed."""
    return -(weights_T * logprobs_T).sum()


def importance_sampling_loss(
    logprobs_T: torch.Tensor, sampler_logprobs_T: torch.Tensor, advantages_T: torch.Tensor
) -> torch.Tensor:
    """REINFORCE corrected for the sampler being a step behind: -sum(ratio * advantages)."""
    return -(torch.exp(logprobs_T - sampler_logprobs_T) * advantages_T).sum()


# ppo and cispo as Tinker's loss documentation defines them, formulas and defaults:
# https://tinker-docs.thinkingmachines.ai/tinker/losses/ppo (the clip is 0.2 on either
# side: thresholds 0.8 and 1.2) and https://tinker-docs.thinkingmachines.ai/tinker/losses/cispo
# (by default no lower bound and an upper one of 4: thresholds 0.0 and 4.0). Both take
# `loss_fn_config={"clip_low_threshold": ..., "clip_high_threshold": ...}`, bounds on the
# ratio itself, not on its distance from 1.
def ppo_loss(
    logprobs_T: torch.Tensor,
    sampler_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    *,
    clip_low_threshold: float,
    clip_high_threshold: float,
) -> torch.Tensor:
    """PPO's clipped objective, token by token: the smaller of the plain and the clipped
    ratio times the advantage, so a token whose ratio has already moved past the clip in the
    advantage's direction stops getting a gradient."""
    ratio_T = torch.exp(logprobs_T - sampler_logprobs_T)
    clipped_T = torch.clamp(ratio_T, clip_low_threshold, clip_high_threshold)
    return -torch.min(ratio_T * advantages_T, clipped_T * advantages_T).sum()


def cispo_loss(
    logprobs_T: torch.Tensor,
    sampler_logprobs_T: torch.Tensor,
    advantages_T: torch.Tensor,
    *,
    clip_low_threshold: float,
    clip_high_threshold: float,
) -> torch.Tensor:
    """CISPO: the clipped ratio, as a constant, weighs each token's logprob times its
    advantage, so clipping bounds a token's weight but never takes its gradient away."""
    ratio_T = torch.exp(logprobs_T - sampler_logprobs_T)
    weight_T = torch.clamp(ratio_T, clip_low_threshold, clip_high_threshold).detach()
    return -(weight_T * logprobs_T * advantages_T).sum()
