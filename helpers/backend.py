"""The backend seam: one call gives a notebook everything it needs, locally or in the cloud.

`connect("local")` uses the local stack (loopback stand-ins for Tinker and Sail with a
tiny real model), starting it if no other kernel has, and needs no keys; should the stack
die, the running cell (or script) stops within a second, in one sentence, and should it
hang, within about 15 s (`local_stack.client.watch`).
`connect("cloud")` uses the real services with the keys in your environment, and costs
money. Notebook code is the same either way.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tinker
from datasets import load_dataset
from tinker_cookbook.tokenizer_utils import get_tokenizer

from helpers.errors import CourseConfigError, install_short_errors
from helpers.notebook_parameters import backend_defaults
from helpers.params import HELD_OUT_PROBLEMS, TRAIN_PROBLEMS, check_backend
from kimi import MODEL_NAME, kimi_renderer
from notebook_ui.display import quiet_tinker_deprecation_logs, show_tables_whole

ADAPTER_CONFIG_PATH = Path(__file__).resolve().parent.parent / "tinker_adapter_config.json"
CLOUD_DATASET = "microsoft/orca-math-word-problems-200k"
CLOUD_TRAIN_ROWS = TRAIN_PROBLEMS["cloud"]
CLOUD_HELD_OUT_ROWS = HELD_OUT_PROBLEMS["cloud"]


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
    held_out_rows: list[dict] = field(repr=False)  # facts training never sees
    # Locally, facts the base model's warm-up saw but RL never trains on; in the cloud
    # empty, since which facts Kimi K2.6 saw in pretraining is not known.
    held_out_known_rows: list[dict] = field(repr=False)
    # Facts training sees, each in a wording it does not (local data only: orca-math's rows
    # carry no facts to match, so in the cloud this is empty).
    held_out_seen_rows: list[dict] = field(repr=False)

    def simulate_latency(self, **knobs: float) -> None:
        """Local backend only: make the local stack wait as the cloud would, for this kernel's
        requests: `latency`, how long a Sail response reports `in_progress`; `train_latency`, the
        least a Tinker training step takes. The real services have no such setting."""
        if self.backend != "local":
            raise CourseConfigError(
                "simulated latencies exist only on the local stack; with backend='cloud' "
                "the waits are the services' own."
            )
        from local_stack.client.control_client import simulate_latency

        simulate_latency(CourseConfigError, **knobs)

    @contextmanager
    def simulated_latency(self, **knobs: float) -> Iterator[None]:
        """`simulate_latency(**knobs)` for the `with` block, however it ends. In the cloud it
        changes nothing: the waits are real."""
        if self.backend != "local":
            yield
            return
        from local_stack.client.control_client import simulated_latency

        with simulated_latency(CourseConfigError, **knobs):
            yield

    def __repr__(self) -> str:
        return (
            f"Course(backend={self.backend!r}, model={self.model_name!r}, "
            f"train_rows={len(self.train_rows)}, held_out_rows={len(self.held_out_rows)})"
        )


def connect(backend: str = "local") -> Course:
    """Check `backend`, then return the clients, tokenizer, renderer and data for it."""
    install_short_errors()
    if backend == "cloud" and (attach := sys.modules.get("local_stack.client.attach")):
        attach.leave_local_stack()  # this kernel joined the local stack: restore your keys
    logins = check_backend(backend)
    quiet_tinker_deprecation_logs()
    show_tables_whole()
    if backend == "cloud":
        print(f"cloud logins found: {logins}")  # where each key comes from, never the key
    if backend == "local":  # imported here so that the cloud path never loads the stack
        from local_stack.client.attach import join_local_stack

        splits = join_local_stack()
    else:
        splits = _cloud_rows()
    tokenizer = get_tokenizer(MODEL_NAME)
    return Course(
        backend=backend,
        service_client=tinker.ServiceClient(),
        tokenizer=tokenizer,
        renderer=kimi_renderer(tokenizer),
        model_name=MODEL_NAME,
        adapter_config=json.loads(ADAPTER_CONFIG_PATH.read_text()),
        defaults=backend_defaults(backend),
        train_rows=splits["train"],
        held_out_rows=splits["held_out"],
        held_out_known_rows=splits["held_out_known"],
        held_out_seen_rows=splits["held_out_seen"],
    )


def tiny_base_model() -> tuple[Any, Any]:
    """A fresh fp32 copy of the local stack's tiny base model (not Kimi K2.6), and its
    vocabulary, read from the files that ship with the course: no server starts, so a notebook
    may open it on either backend."""
    from local_stack.client import tiny_model

    return tiny_model.tiny_base_model()


def tiny_lora_config(rank: int) -> Any:
    """The `peft.LoraConfig` the local stack trains `tiny_base_model()` with, at `rank`."""
    from local_stack.client import tiny_model

    return tiny_model.tiny_lora_config(rank)


def local_base_model_dir(directory: Path) -> Path:
    """The tiny base model saved in `directory` as a Hugging Face model (config and weights)."""
    from local_stack.client import tiny_model

    return tiny_model.local_base_model_dir(directory)


def _cloud_rows() -> dict[str, list[dict]]:
    """orca-math, as the guide loads it, with a held-out slice that training never sees."""
    ds = load_dataset(CLOUD_DATASET, split="train")
    rows = ds.select(range(CLOUD_TRAIN_ROWS + CLOUD_HELD_OUT_ROWS)).to_list()
    rows = [{"question": r["question"], "answer": r["answer"]} for r in rows]
    return {
        "train": rows[:CLOUD_TRAIN_ROWS],
        "held_out": rows[CLOUD_TRAIN_ROWS:],
        "held_out_known": [],
        "held_out_seen": [],
    }
