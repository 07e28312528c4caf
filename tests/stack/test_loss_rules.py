"""The trainer's loss rules on plain tensors (local_stack/engine/trainer.py): each formula and
its gradient, the clip bounds `loss_fn_config` may set, and which datums a loss accepts.
(`course/test_losses.py` and `course/test_trainer_math.py` check them through a model.)"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from local_stack.engine.trainer import (
    LOSS_FNS,
    MalformedDatum,
    TrainingDatum,
    check_datum,
    cispo_loss,
    cross_entropy_loss,
    importance_sampling_loss,
    loss_config,
    ppo_loss,
)

# Learner logprobs, sampler logprobs set so the ratios are 0.5, 1.0, 1.5 and 3.0.
RATIOS = torch.tensor([0.5, 1.0, 1.5, 3.0], dtype=torch.float64)
SAMPLER = torch.tensor([-1.0, -2.0, -0.5, -3.0], dtype=torch.float64)
ADVANTAGES = torch.tensor([1.0, -2.0, -1.0, 0.5], dtype=torch.float64)


def learner() -> torch.Tensor:
    return (SAMPLER + RATIOS.log()).clone().requires_grad_(True)


def value_and_grad(loss, *args, **config):
    logprobs = learner()
    value = loss(logprobs, *args, **config)
    value.backward()
    return float(value), logprobs.grad


def test_cross_entropy_is_the_weighted_negative_log_likelihood_summed():
    logprobs = torch.tensor([-1.0, -0.5, -2.0], requires_grad=True)
    weights = torch.tensor([1.0, 0.0, 0.5])
    value = cross_entropy_loss(logprobs, weights)
    value.backward()
    assert float(value) == pytest.approx(2.0)
    torch.testing.assert_close(logprobs.grad, -weights)


def test_importance_sampling_is_minus_ratio_times_advantage_summed():
    value, grad = value_and_grad(importance_sampling_loss, SAMPLER, ADVANTAGES)
    assert value == pytest.approx(-float((RATIOS * ADVANTAGES).sum()))
    torch.testing.assert_close(grad, -RATIOS * ADVANTAGES)


def test_ppo_takes_the_smaller_objective_so_a_token_past_the_clip_stops_learning():
    value, grad = value_and_grad(
        ppo_loss, SAMPLER, ADVANTAGES, clip_low_threshold=0.8, clip_high_threshold=1.2
    )
    clipped = RATIOS.clamp(0.8, 1.2)
    assert value == pytest.approx(
        -float(torch.min(RATIOS * ADVANTAGES, clipped * ADVANTAGES).sum())
    )
    # 0.5 with advantage +1: below the clip, the smaller term is the plain one, which learns.
    # 1.0: inside. 1.5 with -1: the plain term is smaller and learns. 3.0 with +0.5: clipped,
    # no gradient.
    torch.testing.assert_close(grad, torch.tensor([-0.5, 2.0, 1.5, 0.0], dtype=torch.float64))


def test_cispo_weighs_each_logprob_by_its_clipped_ratio_held_constant():
    value, grad = value_and_grad(
        cispo_loss, SAMPLER, ADVANTAGES, clip_low_threshold=0.8, clip_high_threshold=2.0
    )
    weights = torch.tensor([0.8, 1.0, 1.5, 2.0], dtype=torch.float64)
    logprobs = SAMPLER + RATIOS.log()
    assert value == pytest.approx(-float((weights * logprobs * ADVANTAGES).sum()))
    torch.testing.assert_close(grad, -weights * ADVANTAGES)  # the weight is not differentiated


def datum(loss_fn: str, length: int = 3, **overrides) -> TrainingDatum:
    inputs = {"target_tokens": np.arange(length, dtype=np.int64)}
    for name in LOSS_FNS[loss_fn].inputs:
        inputs[name] = np.linspace(-1, 1, length).astype(np.float32)
    inputs.update(overrides)
    return TrainingDatum(np.arange(length, dtype=np.int64), inputs)


@pytest.mark.parametrize("loss_fn", list(LOSS_FNS))
def test_a_loss_reads_its_inputs_and_config(loss_fn):
    d = datum(loss_fn)
    config = loss_config(loss_fn, {})
    logprobs = torch.tensor([-1.0, -0.5, -2.0])
    got = LOSS_FNS[loss_fn](logprobs, d, config)
    inputs = [torch.from_numpy(d.loss_inputs[k]) for k in LOSS_FNS[loss_fn].inputs]
    expected = LOSS_FNS[loss_fn].compute(logprobs, *inputs, **config)
    assert float(got) == pytest.approx(float(expected))


def test_the_configs_defaults_are_tinkers():
    assert loss_config("ppo", {}) == {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    assert loss_config("cispo", {}) == {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}
    assert loss_config("importance_sampling", {}) == loss_config("cross_entropy", {}) == {}
    assert loss_config("ppo", {"clip_high_threshold": 1.5}) == {
        "clip_low_threshold": 0.8,
        "clip_high_threshold": 1.5,
    }


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("clip_low_threshold", 0.0),
        ("clip_low_threshold", 1.0),
        ("clip_high_threshold", 1.0),
        ("clip_high_threshold", 100.0),
    ],
)
def test_a_clip_bound_may_reach_its_ranges_ends(key, value):
    assert loss_config("cispo", {key: value})[key] == value


@pytest.mark.parametrize(
    ("key", "value", "low", "high"),
    [
        ("clip_low_threshold", -0.01, 0, 1),
        ("clip_low_threshold", 1.01, 0, 1),
        ("clip_high_threshold", 0.99, 1, 100),
        ("clip_high_threshold", 100.5, 1, 100),
        ("clip_high_threshold", math.inf, 1, 100),
        ("clip_low_threshold", math.nan, 0, 1),
    ],
)
def test_a_clip_bound_out_of_range_is_refused_in_one_sentence(key, value, low, high):
    with pytest.raises(ValueError) as refused:
        loss_config("ppo", {key: value})
    assert str(refused.value) == (
        f"loss_fn_config[{key!r}] must be a number from {low} to {high}; got {value!r}"
    )


def test_a_config_key_the_loss_does_not_take_is_refused():
    with pytest.raises(ValueError) as refused:
        loss_config("importance_sampling", {"clip_low_threshold": 0.5})
    assert str(refused.value) == (
        "importance_sampling takes no loss_fn_config; got keys ['clip_low_threshold']"
    )
    with pytest.raises(ValueError) as refused:
        loss_config("ppo", {"clip_low_threshold": 0.5, "beta": 0.1})
    assert str(refused.value) == (
        "ppo takes loss_fn_config keys ['clip_high_threshold', 'clip_low_threshold']; got 'beta'"
    )


def test_a_datum_must_carry_exactly_its_losss_inputs():
    check_datum(datum("importance_sampling"), "importance_sampling", max_tokens=3)
    check_datum(datum("cross_entropy", length=1), "cross_entropy", max_tokens=3)
    with pytest.raises(MalformedDatum) as refused:
        check_datum(datum("cross_entropy"), "ppo", max_tokens=8)
    assert str(refused.value) == (
        "ppo takes loss_fn_inputs ['advantages', 'logprobs', 'target_tokens']; "
        "got ['target_tokens', 'weights']"
    )


@pytest.mark.parametrize("length", [0, 4])
def test_a_datum_is_one_to_max_tokens_long(length):
    with pytest.raises(MalformedDatum) as refused:
        check_datum(datum("cross_entropy", length=length), "cross_entropy", max_tokens=3)
    assert str(refused.value) == f"model_input has {length} tokens; allowed 1 to 3"


def test_each_input_has_one_finite_value_per_token():
    short = datum("ppo", advantages=np.zeros(2, np.float32))
    with pytest.raises(MalformedDatum) as refused:
        check_datum(short, "ppo", max_tokens=8)
    assert str(refused.value) == (
        "loss_fn_inputs['advantages'] has shape [2]; it must be [3], one value per "
        "model_input token"
    )
    for bad in (np.inf, -np.inf, np.nan):
        poisoned = datum("ppo", logprobs=np.array([0.0, bad, 0.0], np.float32))
        with pytest.raises(MalformedDatum) as refused:
            check_datum(poisoned, "ppo", max_tokens=8)
        assert str(refused.value) == "loss_fn_inputs['logprobs'] has non-finite values"
