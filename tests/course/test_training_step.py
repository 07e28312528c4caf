"""Notebook 04's step, in-process (helpers/training.py): which groups teach, the advantages
and datums one optimizer step trains on, the step's metrics, and the held-out counts and
scores. Tinker's `train_step` is replaced at its seam; the cookbook's advantage and datum
code and the course's own code run for real."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest
import torch

import helpers.training as training
from helpers.training import (
    mean_reward,
    metric_rate,
    problem_counts,
    scores,
    split_degenerate_groups,
    train_on_groups,
    train_step_metrics,
)
from tests.rl_groups_support import PROMPT, group, rewards_group, rollout


def test_mean_reward_and_rates_pool_every_rollout():
    groups = [rewards_group(1.0, 0.0, -0.1), rewards_group(1.0)]
    assert mean_reward(groups) == pytest.approx((1.0 + 0.0 - 0.1 + 1.0) / 4)
    assert metric_rate(groups, "correct") == 0.5
    assert metric_rate([group(rollout(0.0, fmt=0.0), rollout(1.0))], "format") == 0.5
    assert mean_reward([]) == 0.0 and metric_rate([], "correct") == 0.0


def test_only_groups_whose_rewards_differ_teach():
    differ, same, alone, close = (
        rewards_group(1.0, 0.0),
        rewards_group(-0.1, -0.1, -0.1),
        rewards_group(1.0),
        rewards_group(0.0, -0.1, 0.0),
    )
    kept, degenerate = split_degenerate_groups([differ, same, alone, close])
    assert kept == [differ, close] and degenerate == [same, alone]


class FakeTraining:
    """`train_step` as Tinker answers it: the learner's logprob of each target token."""

    def __init__(self, monkeypatch, learner_shift: float = 0.0) -> None:
        self.calls: list[dict] = []
        self.learner_shift = learner_shift
        monkeypatch.setattr(training, "train_step", self.train_step)

    async def train_step(self, *, data_D, training_client, learning_rate, metrics, **kwargs):
        self.calls.append(
            {"data": data_D, "client": training_client, "learning_rate": learning_rate, **kwargs}
        )
        metrics["optim/grad_norm"] = 1.5
        return [d.loss_fn_inputs["logprobs"].to_torch() + self.learner_shift for d in data_D]


def test_one_step_trains_on_group_centred_advantages_over_the_sampled_tokens(monkeypatch):
    fake = FakeTraining(monkeypatch)
    groups = [
        group(rollout(1.0, tokens=(21, 22), logprobs=(-0.5, -1.5)), rollout(0.0, tokens=(23,))),
        group(rollout(-0.1), rollout(-0.1), rollout(0.9)),
    ]
    data, learner, metrics = asyncio.run(train_on_groups(groups, 3e-4, "client"))
    [call] = fake.calls
    assert call["client"] == "client" and call["learning_rate"] == 3e-4
    assert call["num_substeps"] == 1 and call["loss_fn"] == "importance_sampling"
    assert call["data"] is data and len(data) == 5
    # Each rollout's advantage is its reward minus its group's mean, on its sampled tokens
    # only; the prompt's positions carry no advantage and no mask.
    expected = [0.5, -0.5, -1 / 3, -1 / 3, 2 / 3]
    for datum, advantage, completion in zip(data, expected, [2, 1, 2, 2, 2], strict=True):
        inputs = {k: v.to_numpy() for k, v in datum.loss_fn_inputs.items()}
        prompt = len(PROMPT) - 1
        assert list(inputs["mask"]) == [0.0] * prompt + [1.0] * completion
        np.testing.assert_allclose(
            inputs["advantages"], [0.0] * prompt + [advantage] * completion, rtol=1e-6
        )
    assert list(data[0].loss_fn_inputs["logprobs"].to_numpy()[-2:]) == [-0.5, -1.5]
    assert list(data[0].loss_fn_inputs["target_tokens"].to_numpy()[-2:]) == [21, 22]
    assert metrics["advantage_abs_mean"] == pytest.approx(np.mean(np.abs(expected)))
    assert metrics["optim/grad_norm"] == 1.5  # what Tinker's optim_step reported
    assert metrics["optim/importance_weight_mean"] == pytest.approx(1.0)
    assert [
        torch.equal(a, b.loss_fn_inputs["logprobs"].to_torch())
        for a, b in zip(learner, data, strict=True)
    ] == [True] * 5


def test_step_metrics_weigh_only_sampled_tokens(monkeypatch):
    FakeTraining(monkeypatch)
    groups = [group(rollout(1.0, logprobs=(-1.0, -2.0)), rollout(0.0, logprobs=(-0.5, -0.5)))]
    data, _, _ = asyncio.run(train_on_groups(groups, 1e-4, "client"))
    # The learner is 0.5 above the sampler on the first rollout's tokens and 0.25 below on
    # the second's; the prompt positions (sampler logprob 0) would weigh exp(-1) if counted.
    learner = [
        d.loss_fn_inputs["logprobs"].to_torch() + torch.tensor([-1.0, -1.0, s, s])
        for d, s in zip(data, (0.5, -0.25), strict=True)
    ]
    metrics = train_step_metrics(data, learner)
    weights = [math.exp(0.5)] * 2 + [math.exp(-0.25)] * 2
    assert metrics["optim/importance_weight_mean"] == pytest.approx(np.mean(weights))
    assert metrics["optim/importance_weight_min"] == pytest.approx(math.exp(-0.25))
    assert metrics["optim/importance_weight_max"] == pytest.approx(math.exp(0.5))
    # The importance-sampling loss: -sum(weight x advantage), advantages +-0.5.
    assert metrics["optim/loss_sum"] == pytest.approx(
        -(0.5 * 2 * math.exp(0.5) - 0.5 * 2 * math.exp(-0.25)), rel=1e-6
    )
    assert metrics["optim/kl_sample_train_v2"] == pytest.approx((0.25 * 2 + 0.0625 * 2) / 4 / 2)


def test_problem_counts_sum_each_problems_samples():
    rows = [{"question": q} for q in ("q0", "q1", "q2")]
    groups = [
        group(
            rollout(1.0, correct=1.0, question="q1"),
            rollout(-0.1, fmt=0.0, question="q1"),
            rollout(0.9, correct=1.0, fmt=0.0, question="q1"),
        ),
        group(rollout(0.0, question="q0")),
    ]
    assert problem_counts(groups, rows) == [
        {"samples": 1, "reward": 0.0, "correct": 0.0, "format": 1.0, "correct_and_format": 0.0},
        {
            "samples": 3,
            "reward": pytest.approx(1.8),
            "correct": 2.0,
            "format": 1.0,
            "correct_and_format": 1.0,
        },
        dict.fromkeys(("samples", "reward", "correct", "format", "correct_and_format"), 0.0),
    ]


def test_scores_are_rates_over_samples_and_over_well_formed_answers():
    counts = {"samples": 8, "reward": 3.8, "correct": 4, "format": 5, "correct_and_format": 3}
    assert scores(counts) == {
        "reward": pytest.approx(3.8 / 8),
        "correct": 0.5,
        "format": 5 / 8,
        "correct_given_format": 3 / 5,
    }
    nothing = dict.fromkeys(counts, 0.0)
    assert scores(nothing) == dict.fromkeys(scores(nothing), 0.0)  # no division by zero
    arrays = {k: np.array([v, 2 * v]) for k, v in counts.items()}
    np.testing.assert_allclose(scores(arrays)["correct_given_format"], [0.6, 0.6])
    one = {"samples": 1, "reward": 1.0, "correct": 1, "format": 1, "correct_and_format": 1}
    assert scores(one) == dict.fromkeys(scores(one), 1.0)  # one sample is a whole rate
