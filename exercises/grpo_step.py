"""Notebook 03's exercises: one GRPO step's numbers, computed by the learner."""

from __future__ import annotations

import torch

from exercises.check import Case, Exercise, Mistake


def _group_advantages(rewards_G: torch.Tensor) -> torch.Tensor:
    return rewards_G - rewards_G.mean()


def _advantage_cases() -> list[Case]:
    def rewards(*values: float) -> tuple[torch.Tensor]:
        return (torch.tensor(values),)

    return [
        Case("one winner among four: rewards 1, 0, 0, 0", rewards(1.0, 0.0, 0.0, 0.0)),
        Case("two winners and a format penalty", rewards(1.0, -0.1, 0.0, 1.0)),
        Case("a tied group: all four right", rewards(1.0, 1.0, 1.0, 1.0)),
        Case("a group of two", rewards(0.0, 1.0)),
    ]


ADVANTAGES = Exercise(
    name="group_advantages",
    notebook="03_one_grpo_step",
    minutes=5,
    reference=_group_advantages,
    cases=_advantage_cases,
    mistakes=[
        Mistake(
            "divided by the group's standard deviation",
            "you divided by the group's standard deviation. That is GRPO as DeepSeekMath "
            "wrote it; the cookbook's default (and this course) only subtracts the mean, "
            "which Dr. GRPO argues is the unbiased choice.",
            lambda rewards_G: (rewards_G - rewards_G.mean()) / (rewards_G.std() + 1e-6),
        ),
        Mistake(
            "the sign flipped",
            "the sign is flipped: a completion that beat its group must get a positive "
            "advantage (reward minus mean, not mean minus reward).",
            lambda rewards_G: rewards_G.mean() - rewards_G,
        ),
        Mistake(
            "the rewards returned unchanged",
            "you returned the rewards themselves. Subtract the group's mean reward, so that a "
            "group whose samples all tie teaches nothing.",
            lambda rewards_G: rewards_G.clone(),
        ),
        Mistake(
            "a leave-one-out baseline",
            "you left each completion out of its own baseline (RLOO). That is a fine "
            "estimator too, but the cookbook's baseline is the mean of the whole group, "
            "the completion included.",
            lambda rewards_G: rewards_G - (rewards_G.sum() - rewards_G) / (len(rewards_G) - 1),
        ),
    ],
)
