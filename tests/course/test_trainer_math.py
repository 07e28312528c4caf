"""The local trainer computes what Tinker documents: checked against plain-torch hand computations.

A tiny random Llama keeps these fast; the LoRA B matrices start random (not zero) so every
adapter tensor gets a nonzero gradient. The loss and gradient checks run in float64, so the
rtol 1e-5 comparison tests the formulas, alignment and batching rather than float32 rounding
(in float32 the two computations agree to ~1e-6 of each gradient's norm). Not all of it:
Llama's RMSNorm and attention softmax compute in float32 even in a float64 model, so a
gradient element near zero can differ by float32 rounding of its tensor's scale (seen:
1e-9 against a largest element of 0.02, on one CPU and not another). `assert_grads_close`
allows that, and no more.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tinker.types import AdamParams

from local_stack.engine import trainer as trainer_module
from local_stack.engine.trainer import (
    LoraTrainer,
    MalformedDatum,
    NonFiniteUpdate,
    TrainingDatum,
    adamw_step,
    check_datum,
)
from tests.trainer_support import REAL_IDS, tiny_trainer

RTOL = 1e-5
# float32 rounding (about 6e-8), with room: the tolerance of an element near zero, as a
# fraction of its tensor's largest element.
FLOAT32_SCALE = 1e-6


def assert_grads_close(got: torch.Tensor, want: torch.Tensor, name: str) -> None:
    atol = FLOAT32_SCALE * want.abs().max().item()
    torch.testing.assert_close(got, want, rtol=RTOL, atol=atol, msg=name)


TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def make_trainer(lora_seed: int = 0, dtype: torch.dtype = torch.float32, **kwargs) -> LoraTrainer:
    """The same base model every time; `lora_seed` picks the adapter's starting point."""
    return tiny_trainer(list(TARGETS), dtype, lora_seed, b_seed=lora_seed, **kwargs)


def make_data(loss_fn: str, lengths=(5, 9, 3), seed: int = 0) -> list[TrainingDatum]:
    rng = np.random.default_rng(seed)
    data = []
    for length in lengths:
        tokens = rng.choice([*REAL_IDS, 7], size=length + 1)  # 7 is outside the vocabulary
        inputs = {"target_tokens": tokens[1:].astype(np.int64)}
        if loss_fn == "cross_entropy":
            inputs["weights"] = rng.uniform(0, 1, length).astype(np.float32)
        else:
            inputs["logprobs"] = rng.uniform(-4, -1, length).astype(np.float32)
            inputs["advantages"] = rng.normal(0, 1, length).astype(np.float32)
        data.append(TrainingDatum(tokens[:-1].astype(np.int64), inputs))
    return data


def hand_loss(trainer: LoraTrainer, data: list[TrainingDatum], loss_fn: str):
    """One datum at a time, no padding, the formula written out token by token."""
    total, all_logprobs = torch.zeros(()), []
    for d in data:
        ids = torch.tensor([trainer.vocab.to_compact(d.input_ids)])
        targets = trainer.vocab.to_compact(d.loss_inputs["target_tokens"])
        logits = trainer.model(input_ids=ids).logits[0]
        logprobs = [
            logits[t, targets[t]] - torch.logsumexp(logits[t], dim=0) for t in range(len(targets))
        ]
        for t, logp in enumerate(logprobs):
            if loss_fn == "cross_entropy":
                total = total - float(d.loss_inputs["weights"][t]) * logp
            else:
                ratio = torch.exp(logp - float(d.loss_inputs["logprobs"][t]))
                total = total - ratio * float(d.loss_inputs["advantages"][t])
        all_logprobs.append(torch.stack(logprobs).detach().numpy())
    return total, all_logprobs


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling"])
def test_loss_logprobs_and_gradients_match_hand_computation(loss_fn):
    trainer = make_trainer(dtype=torch.float64)
    data = make_data(loss_fn)
    params = trainer.params
    expected_loss, expected_logprobs = hand_loss(trainer, data, loss_fn)
    expected_grads = torch.autograd.grad(expected_loss, list(params.values()))

    result = trainer.forward_backward(data, loss_fn)

    assert result.loss_sum == pytest.approx(expected_loss.item(), rel=RTOL)
    for got, want in zip(result.logprobs, expected_logprobs, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL)
    for (name, p), want in zip(params.items(), expected_grads, strict=True):
        assert_grads_close(p.grad, want, name)
    assert all(p.grad.abs().sum() > 0 for p in params.values())


def test_gradients_accumulate_until_optim_step():
    trainer = make_trainer()
    data = make_data("importance_sampling")
    trainer.forward_backward(data[:1], "importance_sampling")
    trainer.forward_backward(data[1:], "importance_sampling")
    accumulated = {n: p.grad.clone() for n, p in trainer.params.items()}
    for p in trainer.params.values():
        p.grad = None
    trainer.forward_backward(data, "importance_sampling")
    for name, p in trainer.params.items():
        torch.testing.assert_close(p.grad, accumulated[name], rtol=RTOL, atol=1e-7)

    trainer.optim_step(AdamParams(learning_rate=1e-3))
    assert all(p.grad is None for p in trainer.params.values())


# 70 datums of 3 to 9 tokens: more than one micro-batch (MICRO_BATCH is 64).
CROSSING_LENGTHS = tuple(3 + i % 7 for i in range(70))


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling"])
def test_micro_batches_add_up_to_one_big_batch(loss_fn, monkeypatch):
    """The summed loss, the logprobs and the gradient of 10 datums, run as three micro-batches
    of at most 4 (the last one short), equal those of the same datums run as one batch (and
    the hand computation's loss). Micro-batches of 4, not the stack's 64: the same code path
    for a seventh of the datums (70 datums in float64 took about 20 s of CPU)."""
    monkeypatch.setattr(trainer_module, "MICRO_BATCH", 4)
    data = make_data(loss_fn, lengths=CROSSING_LENGTHS[:10], seed=2)
    trainer = make_trainer(dtype=torch.float64)
    split = trainer.forward_backward(data, loss_fn)
    split_grads = {name: p.grad.clone() for name, p in trainer.params.items()}
    for p in trainer.params.values():
        p.grad = None

    monkeypatch.setattr(trainer_module, "MICRO_BATCH", len(data))
    whole = trainer.forward_backward(data, loss_fn)

    assert split.loss_sum == pytest.approx(whole.loss_sum, rel=RTOL)
    assert split.loss_sum == pytest.approx(hand_loss(trainer, data, loss_fn)[0].item(), rel=RTOL)
    for got, want in zip(split.logprobs, whole.logprobs, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL)
    for name, p in trainer.params.items():
        assert_grads_close(split_grads[name], p.grad, name)


@pytest.mark.parametrize("loss_fn", ["cross_entropy", "importance_sampling"])
def test_forward_only_gives_the_backward_pass_loss_and_leaves_gradients_alone(loss_fn):
    trainer = make_trainer()
    data = make_data(loss_fn, lengths=CROSSING_LENGTHS, seed=3)
    forward = trainer.forward_backward(data, loss_fn, backward=False)
    assert all(p.grad is None for p in trainer.params.values())
    backward = trainer.forward_backward(data, loss_fn)
    assert forward.loss_sum == pytest.approx(backward.loss_sum, rel=1e-6)
    for got, want in zip(forward.logprobs, backward.logprobs, strict=True):
        np.testing.assert_array_equal(got, want)


def hand_adamw(p, m, v, grad, step: int, hp: AdamParams):
    """AdamW with decoupled weight decay, as its paper and torch's docs write it."""
    m = hp.beta1 * m + (1 - hp.beta1) * grad
    v = hp.beta2 * v + (1 - hp.beta2) * grad * grad
    m_hat, v_hat = m / (1 - hp.beta1**step), v / (1 - hp.beta2**step)
    p = p * (1 - hp.learning_rate * hp.weight_decay)
    return p - hp.learning_rate * m_hat / (v_hat.sqrt() + hp.eps), m, v


# Tinker sends the hyper-parameters with every step: each run changes them between steps.
STEP_SCHEDULES = {
    "lr_and_betas_change": [
        AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8),
        AdamParams(learning_rate=3e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1),
        AdamParams(learning_rate=5e-2, beta1=0.5, beta2=0.9, eps=1e-12, weight_decay=0.01),
    ],
    "clipped_then_not": [
        AdamParams(learning_rate=1e-2, eps=1e-12, grad_clip_norm=0.5),
        AdamParams(learning_rate=1e-2, eps=1e-12, grad_clip_norm=1e3),
        AdamParams(learning_rate=2e-2, eps=1e-12, grad_clip_norm=0.1),
    ],
}


@pytest.mark.parametrize("schedule", STEP_SCHEDULES.values(), ids=list(STEP_SCHEDULES))
def test_adamw_step_follows_each_steps_hyperparameters(schedule):
    """Per-step lr/betas/eps/decay, clipping to the global norm, and a parameter that gets
    no gradient (`b` on the second step) stepping as if its gradient were zero."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(3, 4, dtype=torch.float64)) for _ in range(2)]
    optimizer = torch.optim.AdamW(params)
    expected = [p.detach().clone() for p in params]
    moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    for step, hp in enumerate(schedule, start=1):
        grads = [torch.randn_like(p) * 3 for p in params]
        if step == 2:
            grads[1] = torch.zeros_like(grads[1])
        for p, g in zip(params, grads, strict=True):
            p.grad = None if step == 2 and p is params[1] else g.clone()
        norm = float(torch.cat([g.flatten() for g in grads]).norm())
        if hp.grad_clip_norm > 0:
            grads = [g * min(1.0, hp.grad_clip_norm / (norm + 1e-6)) for g in grads]
        for i, grad in enumerate(grads):
            expected[i], *moments[i] = hand_adamw(expected[i], *moments[i], grad, step, hp)

        assert adamw_step(optimizer, hp) == pytest.approx(norm, rel=1e-12)
        for got, want in zip(params, expected, strict=True):
            torch.testing.assert_close(got.detach(), want, rtol=1e-12, atol=1e-15)
        assert all(p.grad is None for p in params)


def test_save_and_load_restore_weights_and_optimizer_exactly(tmp_path):
    trainer = make_trainer(lora_seed=0)
    data = make_data("importance_sampling")
    for _ in range(2):
        trainer.forward_backward(data, "importance_sampling")
        trainer.optim_step(AdamParams(learning_rate=1e-2))
    trainer.save(tmp_path, with_optimizer=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
        "optimizer.safetensors",
    ]

    restored = make_trainer(lora_seed=1)
    for name, p in restored.params.items():
        assert not torch.equal(p, trainer.params[name])
    restored.load(tmp_path, with_optimizer=True)
    steps, moments = trainer.optimizer_state()
    restored_steps, restored_moments = restored.optimizer_state()
    assert restored_steps == steps == 2
    assert restored_moments.keys() == moments.keys()
    for name, moment in moments.items():
        assert moment.abs().sum() > 0 and torch.equal(restored_moments[name], moment)
    for name, p in trainer.params.items():
        assert torch.equal(restored.params[name], p)

    for t in (trainer, restored):  # one more identical step: identical results
        t.forward_backward(data, "importance_sampling")
        t.optim_step(AdamParams(learning_rate=1e-2))
    for name, p in trainer.params.items():
        assert torch.equal(restored.params[name], p)

    restored.load(tmp_path, with_optimizer=False)  # load_state: weights only, optimizer reset
    steps, moments = restored.optimizer_state()
    assert steps == 0 and all(m.abs().sum() == 0 for m in moments.values())


def test_disabled_module_groups_are_not_trained():
    trainer = make_trainer(trained_groups=("train_attn",))
    names = list(trainer.params)
    assert names and all(
        any(m in n for m in ("q_proj", "k_proj", "v_proj", "o_proj")) for n in names
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda i: i.pop("advantages"), "takes loss_fn_inputs"),
        (lambda i: i.update(mask=np.ones(5, np.float32)), "takes loss_fn_inputs"),
        (lambda i: i.update(advantages=np.ones(4, np.float32)), "shape"),
        (lambda i: i.update(logprobs=np.full(5, np.nan, np.float32)), "non-finite"),
    ],
)
def test_malformed_datums_are_rejected(change, message):
    datum = make_data("importance_sampling", lengths=(5,))[0]
    inputs = dict(datum.loss_inputs)
    change(inputs)
    with pytest.raises(MalformedDatum, match=message):
        check_datum(TrainingDatum(datum.input_ids, inputs), "importance_sampling", max_tokens=256)
    with pytest.raises(MalformedDatum, match="tokens"):
        check_datum(datum, "importance_sampling", max_tokens=4)


def poisoned(data: list[TrainingDatum]) -> list[TrainingDatum]:
    """The same datums, the last with sampler logprobs so low that exp(logp - them) overflows."""
    last = data[-1]
    inputs = dict(last.loss_inputs, logprobs=np.full_like(last.loss_inputs["logprobs"], -1e4))
    return [*data[:-1], TrainingDatum(last.input_ids, inputs)]


def test_a_non_finite_loss_accumulates_nothing():
    trainer = make_trainer()
    trainer.forward_backward(make_data("importance_sampling"), "importance_sampling")
    grads = {n: p.grad.clone() for n, p in trainer.params.items()}
    # 70 datums: the first micro-batch of 64 is fine and its gradient is added before the
    # poisoned second one fails; the failure must take it back out.
    data = poisoned(make_data("importance_sampling", lengths=(3,) * 70, seed=1))
    with pytest.raises(NonFiniteUpdate, match="loss of this batch is (-?inf|nan).*not accumulated"):
        trainer.forward_backward(data, "importance_sampling")
    for name, p in trainer.params.items():
        assert torch.equal(p.grad, grads[name]), name


def test_optim_step_reports_the_gradient_norm_and_learning_rate():
    trainer = make_trainer()
    trainer.forward_backward(make_data("importance_sampling"), "importance_sampling")
    norm = float(torch.cat([p.grad.flatten() for p in trainer.params.values()]).norm())
    metrics = trainer.optim_step(AdamParams(learning_rate=3e-3, grad_clip_norm=norm / 2))
    assert metrics == {"optim/grad_norm": pytest.approx(norm), "optim/learning_rate": 3e-3}


def test_a_step_whose_gradient_norm_overflows_is_refused_though_no_weight_would():
    # Two entries of 3e38 are finite, their norm is not; Adam's second moment overflows
    # too and scales the update to zero, so only the norm tells what happened.
    trainer = make_trainer()
    before = {name: p.detach().clone() for name, p in trainer.params.items()}
    trainer.forward_backward(make_data("importance_sampling"), "importance_sampling")
    next(iter(trainer.params.values())).grad[0, :2] = 3e38
    with pytest.raises(NonFiniteUpdate, match="gradient norm inf"):
        trainer.optim_step(AdamParams(learning_rate=1e-2))
    for name, p in trainer.params.items():
        assert torch.equal(p, before[name]), name


def test_an_update_that_would_leave_non_finite_weights_is_undone():
    """The refused step leaves weights and Adam's state exactly as a run that never tried it."""
    trainer, twin = make_trainer(), make_trainer()
    data, hp = make_data("importance_sampling"), AdamParams(learning_rate=1e-2)
    for t in (trainer, twin):
        t.forward_backward(data, "importance_sampling")
        t.optim_step(hp)
    trainer.forward_backward(data, "importance_sampling")
    next(iter(trainer.params.values())).grad[0, 0] = float("inf")  # as a poisoned sum would
    refusal = (
        r"would make weights non-finite, so it was not applied: the weights and optimizer "
        "state are the last good ones, and the accumulated gradients were discarded$"
    )
    with pytest.raises(NonFiniteUpdate, match=refusal):
        trainer.optim_step(hp)
    assert all(p.grad is None for p in trainer.params.values())  # the bad gradients are gone
    for t in (trainer, twin):
        t.forward_backward(data, "importance_sampling")
        t.optim_step(hp)
    (steps, moments), (twin_steps, twin_moments) = trainer.optimizer_state(), twin.optimizer_state()
    assert steps == twin_steps == 2
    for name, p in trainer.params.items():
        assert torch.isfinite(p).all() and torch.equal(p, twin.params[name]), name
    for name, moment in moments.items():
        assert torch.equal(moment, twin_moments[name]), name
