"""LoRA training on the tiny model, with Tinker's semantics.

What Tinker documents, and this module reproduces:
- A Datum is one sequence: `model_input` (T tokens) and per-position `loss_fn_inputs`, all
  aligned so position t of the input predicts `target_tokens[t]`.
- Losses are sums over tokens and over datums, never means:
  `cross_entropy` = -sum(weights * logp),
  `importance_sampling` = -sum(ratio * advantages), with ratio = exp(logp - sampler_logp),
  `ppo` = -sum(min(ratio * advantages, clip(ratio) * advantages)) and
  `cispo` = -sum(stop_gradient(clip(ratio)) * logp * advantages), where clip clamps to
  [clip_low_threshold, clip_high_threshold] from `loss_fn_config`.
- `forward_backward` returns each datum's per-token logprobs of its targets and adds the
  gradient of the summed loss to the accumulated gradients; only `optim_step` consumes them.
- `optim_step` is `torch.optim.AdamW` with the step's own learning rate, betas, eps,
  decoupled weight decay and optional global-norm clipping (`clip_grad_norm_`'s rule).

Every method here runs torch work and must be called on the compute thread.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import peft
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tinker.types import AdamParams

from local_stack.engine.losses import (
    cispo_loss,
    cross_entropy_loss,
    importance_sampling_loss,
    ppo_loss,
)
from local_stack.engine.tinker_layout import tinker_config, to_peft, to_tinker
from local_stack.engine.vocab import CompactVocab

ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.safetensors"
# Datums per forward pass: bounds the (batch, tokens, vocab) logits tensor.
MICRO_BATCH = 64

# Module names LoRA targets, grouped the way Tinker's LoraConfig switches them on and off.
MODULE_GROUPS = {
    "train_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "train_mlp": ("gate_proj", "up_proj", "down_proj"),
    "train_unembed": ("lm_head",),
}


@dataclass(frozen=True)
class LossFn:
    """A built-in loss: the float inputs it reads besides target_tokens, its formula, and
    the `loss_fn_config` keys it takes, with their defaults."""

    inputs: tuple[str, ...]
    compute: Callable[..., torch.Tensor]
    config_defaults: Mapping[str, float] = field(default_factory=dict)

    def __call__(
        self, logprobs_T: torch.Tensor, datum: TrainingDatum, config: Mapping[str, float]
    ) -> torch.Tensor:
        return self.compute(
            logprobs_T, *(torch.from_numpy(datum.loss_inputs[k]) for k in self.inputs), **config
        )


RL_INPUTS = ("logprobs", "advantages")
LOSS_FNS: dict[str, LossFn] = {
    "cross_entropy": LossFn(("weights",), cross_entropy_loss),
    "importance_sampling": LossFn(RL_INPUTS, importance_sampling_loss),
    "ppo": LossFn(RL_INPUTS, ppo_loss, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}),
    "cispo": LossFn(RL_INPUTS, cispo_loss, {"clip_low_threshold": 0.0, "clip_high_threshold": 4.0}),
}
# The range of each config value the local stack accepts, and how its 400 message says so.
LOSS_CONFIG_RANGES: dict[str, tuple[float, float]] = {
    "clip_low_threshold": (0.0, 1.0),
    "clip_high_threshold": (1.0, 100.0),
}


def loss_config(loss_fn: str, given: Mapping[str, float]) -> dict[str, float]:
    """The config `loss_fn` runs with: its defaults, overridden by `given` once checked.

    Raises ValueError, in one sentence, for a key the loss does not take or a value out of
    its range (a clip threshold is a bound on the ratio: low at most 1, high at least 1).
    """
    defaults = LOSS_FNS[loss_fn].config_defaults
    if given and not defaults:
        raise ValueError(f"{loss_fn} takes no loss_fn_config; got keys {sorted(given)!s:.200}")
    for key, value in given.items():
        if key not in defaults:
            raise ValueError(
                f"{loss_fn} takes loss_fn_config keys {sorted(defaults)}; got {key!r:.40}"
            )
        low, high = LOSS_CONFIG_RANGES[key]
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(
                f"loss_fn_config[{key!r}] must be a number from {low:g} to {high:g}; got {value!r}"
            )
    return {**defaults, **given}


class MalformedDatum(ValueError):
    """A datum the loss function cannot use; the message says what is wrong."""


class NonFiniteUpdate(ValueError):
    """A loss, gradient or update that is not finite; the trainer refused it unchanged."""


@dataclass(frozen=True)
class TrainingDatum:
    """One sequence as it arrived: real Kimi token ids and its per-target loss inputs."""

    input_ids: np.ndarray  # (T,) int64, real ids
    loss_inputs: Mapping[str, np.ndarray]  # target_tokens (T,) int64; float inputs (T,) float32


def check_datum(datum: TrainingDatum, loss_fn: str, max_tokens: int) -> None:
    """Raise MalformedDatum unless `datum` has exactly the inputs `loss_fn` needs, aligned."""
    expected = {"target_tokens", *LOSS_FNS[loss_fn].inputs}
    given = set(datum.loss_inputs)
    if given != expected:
        raise MalformedDatum(
            f"{loss_fn} takes loss_fn_inputs {sorted(expected)}; got {sorted(given)!s:.200}"
        )
    length = len(datum.input_ids)
    if not 0 < length <= max_tokens:
        raise MalformedDatum(f"model_input has {length} tokens; allowed 1 to {max_tokens}")
    for name, values in datum.loss_inputs.items():
        if values.shape != (length,):
            raise MalformedDatum(
                f"loss_fn_inputs[{name!r}] has shape {list(values.shape)}; "
                f"it must be [{length}], one value per model_input token"
            )
        if name != "target_tokens" and not np.isfinite(values).all():
            raise MalformedDatum(f"loss_fn_inputs[{name!r}] has non-finite values")


@dataclass(frozen=True)
class ForwardBackwardResult:
    """Per-datum logprobs of the targets (T each) and the summed loss."""

    logprobs: list[np.ndarray]
    loss_sum: float


def adamw_step(optimizer: torch.optim.AdamW, hp: AdamParams) -> float:
    """One Tinker `optim_step` with torch's AdamW: returns the gradient norm before clipping.

    Tinker's hyper-parameters come with every step, so they are set on the parameter group
    each time. A parameter without an accumulated gradient counts as a zero gradient (torch
    would skip it), so every parameter's moments decay and all share one step count.
    """
    with torch.no_grad():  # a block, not a decorator: `make mutants` skips decorated code
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        grad_norm = torch.nn.utils.get_total_norm([p.grad for p in params])
        if hp.grad_clip_norm > 0:
            torch.nn.utils.clip_grads_with_norm_(params, hp.grad_clip_norm, grad_norm)
        for group in optimizer.param_groups:
            group.update(
                lr=hp.learning_rate,
                betas=(hp.beta1, hp.beta2),
                eps=hp.eps,
                weight_decay=hp.weight_decay,
            )
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return grad_norm.item()


class LoraTrainer:
    """One Tinker training run: a PEFT LoRA adapter on a private copy of the base model."""

    def __init__(
        self,
        base_model: torch.nn.Module,
        vocab: CompactVocab,
        lora_config: peft.LoraConfig,
        *,
        seed: int,
        trained_groups: Sequence[str] = tuple(MODULE_GROUPS),
    ) -> None:
        # PEFT records the model's own name in adapter_config.json; Sail checks it's the course's.
        base_model.name_or_path = lora_config.base_model_name_or_path
        # LoRA A matrices are random; seed them without disturbing anyone else's RNG.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.model = peft.get_peft_model(base_model, lora_config)
        frozen = {m for g in MODULE_GROUPS if g not in trained_groups for m in MODULE_GROUPS[g]}
        for name, p in self.model.named_parameters():
            if "lora_" in name and _module_name(name) in frozen:
                p.requires_grad_(False)
        self.vocab = vocab
        self.params = {name: p for name, p in self.model.named_parameters() if p.requires_grad}
        self.optimizer = torch.optim.AdamW(self.params.values(), foreach=False)

    def forward_backward(
        self,
        data: Sequence[TrainingDatum],
        loss_fn: str,
        *,
        backward: bool = True,
        config: Mapping[str, float] | None = None,
    ) -> ForwardBackwardResult:
        """Logprobs and summed loss for `data`; with `backward`, accumulate its gradient.

        The data must have passed `check_datum` and `config` `loss_config` (the server checks
        both before queueing; None means the loss's defaults). A non-finite loss or gradient
        raises NonFiniteUpdate and leaves the accumulated gradients exactly as they were.
        """
        work = self.forward_backward_slices(data, loss_fn, backward=backward, config=config)
        while True:
            try:
                next(work)
            except StopIteration as done:
                return done.value

    def forward_backward_slices(
        self,
        data: Sequence[TrainingDatum],
        loss_fn: str,
        *,
        backward: bool = True,
        config: Mapping[str, float] | None = None,
    ) -> Generator[None, None, ForwardBackwardResult]:
        """`forward_backward`, pausing (`yield`) after each micro-batch, so the server can
        run other clients' work in between. Nothing else may use this trainer meanwhile."""
        config = loss_config(loss_fn, {}) if config is None else config
        if not backward:
            return (yield from self._forward_backward(data, loss_fn, config, backward=False))
        grads_before = {
            name: None if p.grad is None else p.grad.clone() for name, p in self.params.items()
        }
        try:
            result = yield from self._forward_backward(data, loss_fn, config, backward=True)
            if not _all_finite(p.grad for p in self.params.values() if p.grad is not None):
                raise NonFiniteUpdate("the gradient of this batch is not finite")
        except NonFiniteUpdate as e:
            for name, p in self.params.items():
                p.grad = grads_before[name]
            raise NonFiniteUpdate(f"{e}; it was not accumulated (the model is unchanged)") from e
        return result

    def _forward_backward(
        self,
        data: Sequence[TrainingDatum],
        loss_fn: str,
        config: Mapping[str, float],
        *,
        backward: bool,
    ) -> Generator[None, None, ForwardBackwardResult]:
        spec = LOSS_FNS[loss_fn]
        logprobs: list[np.ndarray] = []
        loss_sum = 0.0
        for start in range(0, len(data), MICRO_BATCH):
            if start:
                yield
            chunk = data[start : start + MICRO_BATCH]
            with torch.set_grad_enabled(backward):
                logprobs_DT = self._target_logprobs(chunk)
                losses = [spec(lp_T, d, config) for d, lp_T in zip(chunk, logprobs_DT, strict=True)]
                loss = torch.stack(losses).sum()
            if backward:
                if not torch.isfinite(loss):
                    raise NonFiniteUpdate(
                        f"the {loss_fn} loss of this batch is {loss.item()}: check its loss "
                        "inputs (an importance weight exp(logprobs - sampler logprobs) "
                        "overflows when the sampler's logprobs are far below the model's)"
                    )
                loss.backward()
            loss_sum += loss.item()
            logprobs.extend(lp.detach().numpy().astype(np.float32) for lp in logprobs_DT)
        return ForwardBackwardResult(logprobs, loss_sum)

    def _target_logprobs(self, data: Sequence[TrainingDatum]) -> list[torch.Tensor]:
        """log p(target_t | input_<=t) for each datum, from one right-padded forward pass.

        No attention mask is needed: attention is causal, so a real position never sees the
        padding after it, and the padded positions' outputs are dropped.
        """
        lengths = [len(d.input_ids) for d in data]
        input_ids_BT = torch.zeros((len(data), max(lengths)), dtype=torch.long)
        target_ids_BT = torch.zeros_like(input_ids_BT)
        for row, d in enumerate(data):
            input_ids_BT[row, : lengths[row]] = torch.tensor(self.vocab.to_compact(d.input_ids))
            target_ids_BT[row, : lengths[row]] = torch.tensor(
                self.vocab.to_compact(d.loss_inputs["target_tokens"])
            )
        logits_BTV = self.model(input_ids=input_ids_BT, use_cache=False).logits
        logprobs_BTV = torch.log_softmax(logits_BTV, dim=-1)
        logprobs_BT = logprobs_BTV.gather(-1, target_ids_BT.unsqueeze(-1)).squeeze(-1)
        return [logprobs_BT[row, :length] for row, length in enumerate(lengths)]

    def optim_step(self, hp: AdamParams) -> dict[str, float]:
        """One AdamW step from the accumulated gradients, which it consumes.

        A step that would leave a non-finite weight is undone: the weights and Adam's state
        stay the last good ones, the gradients are dropped, and NonFiniteUpdate says so.
        """
        weights = {name: p.detach().clone() for name, p in self.params.items()}
        moments = {p: {k: t.clone() for k, t in s.items()} for p, s in self.optimizer.state.items()}
        grad_norm = adamw_step(self.optimizer, hp)
        if not (math.isfinite(grad_norm) and _all_finite(self.params.values())):
            with torch.no_grad():
                for name, p in self.params.items():
                    p.copy_(weights[name])
            self.optimizer.state.clear()  # (hyper-parameters need no restoring: set each step)
            self.optimizer.state.update(moments)
            raise NonFiniteUpdate(
                f"this optim_step (gradient norm {grad_norm}) would make weights non-finite, "
                "so it was not applied: the weights and optimizer state are the last good "
                "ones, and the accumulated gradients were discarded"
            )
        return {"optim/grad_norm": grad_norm, "optim/learning_rate": hp.learning_rate}

    def optimizer_state(self) -> tuple[int, dict[str, torch.Tensor]]:
        """Adam's step count and its moments by parameter name (zeros before the first step)."""
        steps, tensors = 0, {}
        for name, p in self.params.items():
            state = self.optimizer.state.get(p) or {}
            steps = int(state["step"]) if state else 0
            for key in ("exp_avg", "exp_avg_sq"):
                tensors[f"{name}.{key}"] = state.get(key, torch.zeros_like(p))
        return steps, tensors

    def save(self, directory: Path, *, with_optimizer: bool) -> None:
        """Write the adapter in Tinker's own layout (`tinker_layout`: what Sail downloads and
        the cookbook's `build_lora_adapter` converts) and, for a training state, the optimizer."""
        config = self.model.peft_config["default"]
        peft_state = peft.get_peft_model_state_dict(self.model, save_embedding_layers=False)
        save_file(to_tinker(peft_state), directory / ADAPTER_WEIGHTS_FILE)
        (directory / ADAPTER_CONFIG_FILE).write_bytes(tinker_config(config.r, config.lora_alpha))
        if with_optimizer:
            steps, tensors = self.optimizer_state()
            save_file(tensors, directory / OPTIMIZER_FILE, metadata={"steps": str(steps)})

    def load(self, directory: Path, *, with_optimizer: bool) -> None:
        """Restore adapter weights; restore the optimizer too, or reset it (Tinker's load_state)."""
        state = to_peft(load_file(directory / ADAPTER_WEIGHTS_FILE))
        result = peft.set_peft_model_state_dict(self.model, state)
        if result.unexpected_keys:
            raise ValueError(f"checkpoint does not fit this adapter: {result.unexpected_keys}")
        self.optimizer.state.clear()  # Tinker's load_state starts Adam afresh...
        if with_optimizer:  # ...and load_state_with_optimizer restores it
            self._load_optimizer(directory / OPTIMIZER_FILE)
        self.optimizer.zero_grad(set_to_none=True)

    def _load_optimizer(self, path: Path) -> None:
        with safe_open(path, "pt") as f:
            steps = int(f.metadata()["steps"])
            if steps == 0:
                return
            state = {
                i: {
                    "step": torch.tensor(float(steps), dtype=torch.float32),
                    "exp_avg": f.get_tensor(f"{name}.exp_avg"),
                    "exp_avg_sq": f.get_tensor(f"{name}.exp_avg_sq"),
                }
                for i, name in enumerate(self.params)
            }
        groups = self.optimizer.state_dict()["param_groups"]
        self.optimizer.load_state_dict({"state": state, "param_groups": groups})

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Copies of the adapter's trainable tensors by name (for tests and comparisons)."""
        return {name: p.detach().clone() for name, p in self.params.items()}


def _all_finite(tensors: Iterable[torch.Tensor]) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def _module_name(param_name: str) -> str:
    """`...layers.0.self_attn.q_proj.lora_A.default.weight` -> `q_proj`."""
    parts = param_name.split(".")
    return parts[parts.index(next(p for p in parts if p.startswith("lora_"))) - 1]
