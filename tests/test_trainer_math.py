"""The local trainer computes what Tinker documents: checked against plain-torch hand computations.

A tiny random Llama keeps these fast; the LoRA B matrices start random (not zero) so every
adapter tensor gets a nonzero gradient. The loss and gradient checks run in float64, so the
rtol 1e-5 comparison tests the formulas, alignment and batching rather than float32 rounding
(in float32 the two computations agree to ~1e-6 of each gradient's norm).
"""

from __future__ import annotations

import numpy as np
import peft
import pytest
import torch
import transformers
from tinker.types import AdamParams

from local_stack.engine.model import tiny_llama_config
from local_stack.engine.trainer import (
    AdamW,
    LoraTrainer,
    MalformedDatum,
    TrainingDatum,
    check_datum,
)
from local_stack.engine.vocab import CompactVocab

RTOL = 1e-5
REAL_IDS = range(1000, 1040)  # the compact vocabulary's real ids; 5 is the unknown token
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "lm_head")


def make_trainer(lora_seed: int = 0, dtype: torch.dtype = torch.float32, **kwargs) -> LoraTrainer:
    """The same base model every time; `lora_seed` picks the adapter's starting point."""
    vocab = CompactVocab(REAL_IDS, unk_real_id=5)
    torch.manual_seed(0)
    config = tiny_llama_config(vocab.size)
    config.hidden_size, config.intermediate_size, config.num_attention_heads = 16, 32, 2
    config.num_key_value_heads = 2
    base = transformers.LlamaForCausalLM(config).to(dtype)
    lora = peft.LoraConfig(r=4, lora_alpha=8, target_modules=list(TARGETS))
    trainer = LoraTrainer(base, vocab, lora, seed=lora_seed, **kwargs)
    generator = torch.Generator().manual_seed(lora_seed)
    with torch.no_grad():
        for name, p in trainer.model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return trainer


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
    params = trainer.optimizer.params
    expected_loss, expected_logprobs = hand_loss(trainer, data, loss_fn)
    expected_grads = torch.autograd.grad(expected_loss, list(params.values()))

    result = trainer.forward_backward(data, loss_fn)

    assert result.loss_sum == pytest.approx(expected_loss.item(), rel=RTOL)
    for got, want in zip(result.logprobs, expected_logprobs, strict=True):
        np.testing.assert_allclose(got, want, rtol=RTOL)
    for (name, p), want in zip(params.items(), expected_grads, strict=True):
        torch.testing.assert_close(p.grad, want, rtol=RTOL, atol=1e-12, msg=name)
    assert all(p.grad.abs().sum() > 0 for p in params.values())


def test_gradients_accumulate_until_optim_step():
    trainer = make_trainer()
    data = make_data("importance_sampling")
    trainer.forward_backward(data[:1], "importance_sampling")
    trainer.forward_backward(data[1:], "importance_sampling")
    accumulated = {n: p.grad.clone() for n, p in trainer.optimizer.params.items()}
    for p in trainer.optimizer.params.values():
        p.grad = None
    trainer.forward_backward(data, "importance_sampling")
    for name, p in trainer.optimizer.params.items():
        torch.testing.assert_close(p.grad, accumulated[name], rtol=RTOL, atol=1e-7)

    trainer.optim_step(AdamParams(learning_rate=1e-3))
    assert all(p.grad is None for p in trainer.optimizer.params.values())


def test_forward_only_leaves_gradients_alone():
    trainer = make_trainer()
    result = trainer.forward_backward(make_data("cross_entropy"), "cross_entropy", backward=False)
    assert result.loss_sum > 0
    assert all(p.grad is None for p in trainer.optimizer.params.values())


@pytest.mark.parametrize(
    "hp",
    [
        AdamParams(learning_rate=1e-2, beta1=0.9, beta2=0.95, eps=1e-8),
        AdamParams(learning_rate=3e-3, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1),
        AdamParams(learning_rate=1e-2, eps=1e-12, grad_clip_norm=0.5),
    ],
)
def test_adam_matches_torch_adamw(hp):
    torch.manual_seed(0)
    ours = {"a": torch.nn.Parameter(torch.randn(3, 4)), "b": torch.nn.Parameter(torch.randn(5))}
    theirs = {n: torch.nn.Parameter(p.detach().clone()) for n, p in ours.items()}
    optimizer = AdamW(ours)
    reference = torch.optim.AdamW(
        theirs.values(),
        lr=hp.learning_rate,
        betas=(hp.beta1, hp.beta2),
        eps=hp.eps,
        weight_decay=hp.weight_decay,
        foreach=False,
    )
    for _ in range(4):
        grads = {n: torch.randn_like(p) * 3 for n, p in ours.items()}
        for n in ours:
            ours[n].grad, theirs[n].grad = grads[n].clone(), grads[n].clone()
        norm = optimizer.step(hp)
        want_norm = torch.nn.utils.clip_grad_norm_(
            theirs.values(), hp.grad_clip_norm if hp.grad_clip_norm > 0 else float("inf")
        )
        reference.step()
        assert norm == pytest.approx(want_norm.item(), rel=1e-6)
        for n in ours:
            torch.testing.assert_close(ours[n].detach(), theirs[n].detach(), rtol=1e-6, atol=0)


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
    for name, p in restored.optimizer.params.items():
        assert not torch.equal(p, trainer.optimizer.params[name])
    restored.load(tmp_path, with_optimizer=True)
    assert restored.optimizer.steps == trainer.optimizer.steps == 2
    for name, p in trainer.optimizer.params.items():
        assert torch.equal(restored.optimizer.params[name], p)
        assert torch.equal(restored.optimizer.exp_avg[name], trainer.optimizer.exp_avg[name])
        assert torch.equal(restored.optimizer.exp_avg_sq[name], trainer.optimizer.exp_avg_sq[name])

    for t in (trainer, restored):  # one more identical step: identical results
        t.forward_backward(data, "importance_sampling")
        t.optim_step(AdamParams(learning_rate=1e-2))
    for name, p in trainer.optimizer.params.items():
        assert torch.equal(restored.optimizer.params[name], p)

    restored.load(tmp_path, with_optimizer=False)  # load_state: weights only, optimizer reset
    assert restored.optimizer.steps == 0


def test_disabled_module_groups_are_not_trained():
    trainer = make_trainer(trained_groups=("train_attn",))
    names = list(trainer.optimizer.params)
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
