"""`ppo` and `cispo` as Tinker's loss documentation defines them, with their loss_fn_config.

Formulas and defaults: https://tinker-docs.thinkingmachines.ai/tinker/losses/ppo and
https://tinker-docs.thinkingmachines.ai/tinker/losses/cispo. On a hand-built datum whose
importance ratios are placed on both sides of the clip, the trainer's loss matches each
formula computed here in plain floats, within 1e-5; the clip shows in the gradients; and
the server refuses malformed configs with a 400 in one sentence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tinker
import torch
from tinker import types
from tinker_datums import MODEL, rl_datum

from local_stack.engine.trainer import LoraTrainer, TrainingDatum, loss_config
from tests import trainer_support as support

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # tinker deprecates archive URLs

# One datum of 7 targets. Ratios learner/sampler, placed around PPO's clip [0.8, 1.2] and
# CISPO's default [0, 4], with advantages of both signs.
TOKENS = [1003, 1017, 1009, 1030, 1001, 1022, 1011, 1038]
RATIOS = [0.5, 0.9, 1.0, 1.1, 1.5, 3.0, 6.0]
ADVANTAGES = [1.0, -1.0, 2.0, -0.5, 1.0, -1.0, 1.5]


def tiny_trainer(dtype: torch.dtype = torch.float64) -> LoraTrainer:
    """Float64, so a 1e-5 comparison tests formulas, not rounding."""
    return support.tiny_trainer(["q_proj", "v_proj", "lm_head"], dtype, lora_seed=0, b_seed=1)


def hand_datum(trainer: LoraTrainer, ratios=RATIOS, advantages=ADVANTAGES) -> TrainingDatum:
    """The datum, with sampler logprobs set so that learner/sampler is each chosen ratio."""
    targets = np.array(TOKENS[1:], np.int64)
    weights = {"target_tokens": targets, "weights": np.ones(len(targets), np.float32)}
    probe = TrainingDatum(np.array(TOKENS[:-1], np.int64), weights)
    [learner] = trainer.forward_backward([probe], "cross_entropy", backward=False).logprobs
    sampler = learner.astype(np.float64) - np.log(ratios)
    inputs = {
        "target_tokens": targets,
        "logprobs": sampler.astype(np.float32),
        "advantages": np.array(advantages, np.float32),
    }
    return TrainingDatum(np.array(TOKENS[:-1], np.int64), inputs)


def ppo_by_hand(learner, sampler, advantages, low: float, high: float) -> float:
    total = 0.0
    for lp, q, a in zip(learner, sampler, advantages, strict=True):
        ratio = math.exp(float(lp) - float(q))
        total += min(ratio * a, min(max(ratio, low), high) * a)
    return -total


def cispo_by_hand(learner, sampler, advantages, low: float, high: float) -> float:
    total = 0.0
    for lp, q, a in zip(learner, sampler, advantages, strict=True):
        ratio = math.exp(float(lp) - float(q))
        total += min(max(ratio, low), high) * float(lp) * a
    return -total


BY_HAND = {"ppo": ppo_by_hand, "cispo": cispo_by_hand}


@pytest.mark.parametrize(
    ("loss_fn", "config", "thresholds"),
    [
        ("ppo", {}, (0.8, 1.2)),  # the documented defaults
        ("cispo", {}, (0.0, 4.0)),
        ("ppo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05}, (0.9, 1.05)),
        ("cispo", {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}, (0.8, 1.2)),
    ],
)
def test_each_loss_matches_its_formula_on_a_hand_built_datum(loss_fn, config, thresholds):
    trainer = tiny_trainer()
    datum = hand_datum(trainer)
    result = trainer.forward_backward([datum], loss_fn, config=loss_config(loss_fn, config))
    [learner] = result.logprobs
    by_hand = BY_HAND[loss_fn](
        learner, datum.loss_inputs["logprobs"], datum.loss_inputs["advantages"], *thresholds
    )
    assert result.loss_sum == pytest.approx(by_hand, abs=1e-5)
    # The datum really straddles the clip, so the value differs from importance_sampling's.
    plain = trainer.forward_backward([datum], "importance_sampling", backward=False).loss_sum
    assert abs(result.loss_sum - plain) > 0.1


def adapter_gradient(loss_fn: str, ratios, advantages) -> torch.Tensor:
    """The adapter's whole gradient, flattened, from one fresh trainer and one datum."""
    trainer = tiny_trainer()
    datum = hand_datum(trainer, ratios, advantages)
    trainer.forward_backward([datum], loss_fn)
    return torch.cat([p.grad.flatten() for p in trainer.params.values() if p.grad is not None])


def test_inside_the_clip_ppo_and_cispo_step_as_importance_sampling_does():
    inside = [0.85, 0.95, 1.0, 1.05, 1.15, 0.9, 1.1]
    plain = adapter_gradient("importance_sampling", inside, ADVANTAGES)
    assert plain.abs().max() > 1e-3
    for loss_fn in ("ppo", "cispo"):
        assert torch.allclose(adapter_gradient(loss_fn, inside, ADVANTAGES), plain, atol=1e-10)


def test_past_the_clip_ppo_drops_the_gradient_and_cispo_keeps_it():
    """Every token's ratio has moved past PPO's clip in its advantage's direction: PPO has
    no gradient left, CISPO still has one (its weights capped at 1.2 here)."""
    past = [1.5, 0.5, 2.0, 0.6, 1.3, 0.7, 1.25]
    pushed = [1.0 if r > 1 else -1.0 for r in past]
    assert adapter_gradient("ppo", past, pushed).abs().max() == 0
    assert adapter_gradient("importance_sampling", past, pushed).abs().max() > 1e-3
    assert adapter_gradient("cispo", past, pushed).abs().max() > 1e-3


# -- through the SDK, on the local stack -------------------------------------------------


@pytest.fixture(scope="module")
def training_client(local_stack):
    return tinker.ServiceClient().create_lora_training_client(base_model=MODEL, rank=8)


@pytest.mark.parametrize(
    ("loss_fn", "config", "thresholds"),
    [("ppo", None, (0.8, 1.2)), ("cispo", {"clip_high_threshold": 1.5}, (0.0, 1.5))],
)
def test_the_sdk_trains_with_ppo_and_cispo(training_client, loss_fn, config, thresholds):
    """rl_datum's sampler logprobs are -3 everywhere, so its ratios spread over the clip."""
    datum = rl_datum(seed=3)
    result = training_client.forward_backward([datum], loss_fn, config).result()
    learner = result.loss_fn_outputs[0]["logprobs"].to_numpy()
    inputs = {k: v.to_numpy() for k, v in datum.loss_fn_inputs.items()}
    by_hand = BY_HAND[loss_fn](learner, inputs["logprobs"], inputs["advantages"], *thresholds)
    # float32 on the wire and in the model: compared against the terms' size.
    scale = sum(
        abs(float(a)) * math.exp(float(lp) + 3)
        for lp, a in zip(learner, inputs["advantages"], strict=True)
    )
    assert result.metrics["loss:sum"] == pytest.approx(by_hand, abs=1e-5 * max(scale, 1.0))
    training_client.optim_step(types.AdamParams(learning_rate=1e-4)).result()


@pytest.mark.parametrize(
    ("loss_fn", "config", "says"),
    [
        (
            "importance_sampling",
            {"clip_low_threshold": 0.8},
            "importance_sampling takes no loss_fn_config",
        ),
        ("ppo", {"clip_ratio": 0.2}, "ppo takes loss_fn_config keys"),
        ("cispo", {"clip_low_threshold": "low"}, "must be a number; got 'low'"),
        ("ppo", {"clip_low_threshold": 1.5}, "must be a number from 0 to 1; got 1.5"),
        ("ppo", {"clip_low_threshold": -0.2}, "must be a number from 0 to 1; got -0.2"),
        ("cispo", {"clip_high_threshold": 0.5}, "must be a number from 1 to 100; got 0.5"),
        ("ppo", {"clip_high_threshold": float("nan")}, "must be a number from 1 to 100; got nan"),
        ("ppo", {"clip_high_threshold": 1e9}, "must be a number from 1 to 100"),
    ],
)
def test_a_malformed_loss_fn_config_is_a_400_in_one_sentence(
    training_client, loss_fn, config, says
):
    with pytest.raises(tinker.BadRequestError) as refused:
        training_client.forward_backward([rl_datum()], loss_fn, config).result()
    assert refused.value.status_code == 400 and says in str(refused.value)
    sentence = str(refused.value).split(says, 1)[1]
    assert ". " not in sentence  # one sentence, nothing after it
    # The model keeps working.
    result = training_client.forward_backward([rl_datum()], "ppo").result()
    assert "loss:sum" in result.metrics
