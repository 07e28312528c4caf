"""The supervised warm-up that turns `model.new_model` into a tiny base model: the training
loop both build scripts run (`scripts/build_tiny_base.py`, `scripts/build_tiny_shell_base.py`),
each on examples of its own task. Build time only; the running stack never calls it.

An example is a sequence of compact ids and, per position, whether it is trained (its next
token counts in the loss). Deterministic given the model's seed and the examples' order.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

LEARNING_RATE = 3e-3
WARMUP_FRACTION = 0.05  # of the steps, with the learning rate rising linearly
Example = tuple[list[int], list[bool]]


def supervised_warm_up(
    model: torch.nn.Module, next_batch: Callable[[], Sequence[Example]], steps: int
) -> torch.nn.Module:
    """Next-token training of `model` on `steps` batches from `next_batch()`: AdamW, the
    gradient clipped to norm 1, warm-up then cosine decay. Prints the loss every 100 steps
    and returns the model in eval mode."""
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(steps))
    for step in range(steps):
        input_ids_BT, mask_BT, labels_BT = _pad_for_training(next_batch())
        loss = model(input_ids=input_ids_BT, attention_mask=mask_BT, labels=labels_BT).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 100 == 0 or step == steps - 1:
            print(f"  step {step:4d}  loss {loss.item():.3f}", flush=True)
    return model.eval()


def _lr_factor(steps: int) -> Callable[[int], float]:
    """Linear warm-up, then cosine decay to a tenth."""
    warm = max(1, int(steps * WARMUP_FRACTION))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(1, steps - warm)
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(progress * math.pi))

    return factor


def _pad_for_training(batch: Sequence[Example]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ids, attention mask and labels (-100 where not trained)."""
    longest = max(len(ids) for ids, _ in batch)
    input_ids_BT = torch.zeros((len(batch), longest), dtype=torch.long)
    mask_BT = torch.zeros_like(input_ids_BT)
    labels_BT = torch.full_like(input_ids_BT, -100)
    for row, (ids, trained) in enumerate(batch):
        ids_T = torch.tensor(ids)
        input_ids_BT[row, : len(ids)] = ids_T
        mask_BT[row, : len(ids)] = 1
        labels_BT[row, : len(ids)] = ids_T.masked_fill(~torch.tensor(trained), -100)
    return input_ids_BT, mask_BT, labels_BT
