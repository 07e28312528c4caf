"""The backend seam: one call gives a notebook everything it needs, locally or in the cloud.

`connect("local")` uses the local stack (loopback stand-ins for Tinker and Sail with a
tiny real model), starting it if no other kernel has, and needs no keys. `connect("cloud")`
uses the real services with the keys in your environment, and costs money. Notebook code is
the same either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tinker
from datasets import load_dataset
from tinker_cookbook import renderers
from tinker_cookbook.tokenizer_utils import get_tokenizer

from helpers.errors import install_short_errors
from helpers.params import check_backend
from helpers.sdk_noise import quiet_tinker_deprecation_logs

MODEL_NAME = "moonshotai/Kimi-K2.6"
RENDERER_NAME = "kimi_k26"
ADAPTER_CONFIG_PATH = Path(__file__).resolve().parent.parent / "tinker_adapter_config.json"
CLOUD_DATASET = "microsoft/orca-math-word-problems-200k"
CLOUD_TRAIN_ROWS = 2000
CLOUD_HELD_OUT_ROWS = 200
# Settings that depend on the model behind the backend: Kimi K2.6 thinks at length and
# needs the guide's small learning rate; the local tiny model answers in ~20 tokens and,
# with ~100k parameters, needs a much larger one.
BACKEND_DEFAULTS = {
    "local": {"max_tokens": 24, "learning_rate": 1e-3},
    "cloud": {"max_tokens": 1024, "learning_rate": 1e-5},
}


@dataclass
class Course:
    """What every notebook works with: clients, tokenizer, renderer and data."""

    backend: str
    service_client: tinker.ServiceClient
    tokenizer: Any
    renderer: Any
    model_name: str
    adapter_config: dict
    defaults: dict
    train_rows: list[dict] = field(repr=False)
    held_out_rows: list[dict] = field(repr=False)

    def __repr__(self) -> str:
        return (
            f"Course(backend={self.backend!r}, model={self.model_name!r}, "
            f"train_rows={len(self.train_rows)}, held_out_rows={len(self.held_out_rows)})"
        )


def connect(backend: str = "local") -> Course:
    """Check `backend`, then return the clients, tokenizer, renderer and data for it."""
    install_short_errors()
    if backend == "cloud":
        _leave_local()  # restores your shell's keys if this kernel used the local stack
    check_backend(backend)
    quiet_tinker_deprecation_logs()
    if backend == "local":
        train_rows, held_out_rows = _start_local()
    else:
        train_rows, held_out_rows = _cloud_rows()
    tokenizer = get_tokenizer(MODEL_NAME)
    return Course(
        backend=backend,
        service_client=tinker.ServiceClient(),
        tokenizer=tokenizer,
        renderer=renderers.get_renderer(RENDERER_NAME, tokenizer=tokenizer),
        model_name=MODEL_NAME,
        adapter_config=json.loads(ADAPTER_CONFIG_PATH.read_text()),
        defaults=BACKEND_DEFAULTS[backend],
        train_rows=train_rows,
        held_out_rows=held_out_rows,
    )


def _start_local() -> tuple[list[dict], list[dict]]:
    # Imported here so the cloud path never loads the local stack.
    from helpers.data import arithmetic_dataset
    from helpers.kimi import register_offline_kimi_tokenizer
    from local_stack.supervisor import start_local_stack

    register_offline_kimi_tokenizer()
    start_local_stack()
    splits = arithmetic_dataset()
    return splits["train"].to_list(), splits["held_out"].to_list()


def _leave_local() -> None:
    """Switching a kernel from local to cloud: restore the SDK variables (the keys and base
    URLs from your shell) that the local stack had replaced. The stack keeps serving any
    other kernel."""
    from local_stack.supervisor import detach_local_stack

    detach_local_stack()


def _cloud_rows() -> tuple[list[dict], list[dict]]:
    """orca-math, as the guide loads it, with a held-out slice that training never sees."""
    ds = load_dataset(CLOUD_DATASET, split="train")
    rows = ds.select(range(CLOUD_TRAIN_ROWS + CLOUD_HELD_OUT_ROWS)).to_list()
    rows = [{"question": r["question"], "answer": r["answer"]} for r in rows]
    return rows[:CLOUD_TRAIN_ROWS], rows[CLOUD_TRAIN_ROWS:]
