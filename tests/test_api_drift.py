"""Every tinker / tinker_cookbook / sail symbol the course calls exists and takes our arguments.

When a pinned SDK is upgraded, this test names the call that broke before a notebook does.
Each entry: (dotted path, positional args, keyword args) as the course passes them; the
args are bound to the signature (not called), so a renamed or removed parameter fails.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

SENTINEL = object()
CALLS: list[tuple[str, tuple, dict[str, Any]]] = [
    # Notebook 01: scoring.
    ("tinker_cookbook.renderers.get_renderer", ("kimi_k26",), {"tokenizer": SENTINEL}),
    ("tinker_cookbook.renderers.get_text_content", (SENTINEL,), {}),
    ("tinker_cookbook.tokenizer_utils.get_tokenizer", ("moonshotai/Kimi-K2.6",), {}),
    ("tinker_cookbook.tokenizer_utils.register_tokenizer", ("name", SENTINEL), {}),
    ("tinker.ModelInput.empty", (), {}),
    (
        "tinker_cookbook.rl.types.StepResult",
        (),
        {
            "reward": 1.0,
            "episode_done": True,
            "next_observation": SENTINEL,
            "next_stop_condition": [],
            "metrics": {},
            "logs": {},
        },
    ),
    # Notebook 02: snapshot and serve.
    ("tinker.ServiceClient", (), {}),
    (
        "tinker.ServiceClient.create_lora_training_client_async",
        (SENTINEL,),
        {"base_model": "moonshotai/Kimi-K2.6", "rank": 32},
    ),
    (
        "tinker.TrainingClient.save_weights_for_sampler_async",
        (SENTINEL, "name"),
        {"ttl_seconds": 3600},
    ),
    (
        "sail.get_tinker_checkpoint_signed_url_async",
        (SENTINEL, "tinker://run/sampler_weights/x"),
        {"ttl_seconds": 3600},
    ),
    # The method sail's helper needs: gone from tinker 0.36 (why tinker is pinned).
    (
        "tinker.lib.public_interfaces.rest_client.RestClient"
        ".get_checkpoint_archive_url_from_tinker_path_async",
        (SENTINEL, "tinker://run/sampler_weights/x"),
        {},
    ),
    (
        "sail.SailTokenCompleter",
        (),
        {
            "model": "moonshotai/Kimi-K2.6",
            "max_tokens": 1024,
            "temperature": 1.0,
            "completion_window": "balanced",
            "tinker_lora_signed_url": "http://x",
            "adapter_config": {},
            "tinker_lora_name": "name",
        },
    ),
    ("sail.reset_transports", (), {}),
    # Notebook 03: the training loop.
    ("tinker_cookbook.rl.rollouts.do_group_rollout", (SENTINEL, SENTINEL), {"strategy": None}),
    ("tinker_cookbook.rl.rollout_strategy.MinViableGroup", (), {"min_successful": 2}),
    ("tinker_cookbook.rl.data_processing.compute_advantages", (SENTINEL,), {}),
    ("tinker_cookbook.rl.data_processing.assemble_training_data", (SENTINEL, SENTINEL), {}),
    (
        "tinker_cookbook.rl.train.train_step",
        (),
        {
            "data_D": [],
            "training_client": SENTINEL,
            "learning_rate": 1e-5,
            "num_substeps": 1,
            "loss_fn": "importance_sampling",
            "metrics": {},
        },
    ),
    ("tinker_cookbook.rl.metrics.compute_kl_sample_train", (SENTINEL, SENTINEL), {}),
    (
        "tinker.ServiceClient.create_lora_training_client_async",
        (SENTINEL,),
        {"base_model": "moonshotai/Kimi-K2.6", "rank": 32, "seed": 0},
    ),
    (
        "tinker.TrainingClient.save_state_async",
        (SENTINEL, "name"),
        {"ttl_seconds": 3600, "overwrite": True},
    ),
    ("tinker.ServiceClient.create_rest_client", (SENTINEL,), {}),
    (
        "tinker.lib.public_interfaces.rest_client.RestClient"
        ".delete_checkpoint_from_tinker_path_async",
        (SENTINEL, "tinker://run/sampler_weights/x"),
        {},
    ),
    ("tinker.TrainingClient.load_state_with_optimizer_async", (SENTINEL, "tinker://x"), {}),
    ("tinker_cookbook.rl.types.TrajectoryGroup.get_total_rewards", (SENTINEL,), {}),
    # Notebook 04: sandboxed rollouts.
    ("sail.tinker_sandbox_factory", ("env_dir", 600), {"size": "s"}),
]


def resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize(("dotted", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_symbol_exists_and_accepts_our_arguments(dotted: str, args: tuple, kwargs: dict) -> None:
    target = resolve(dotted)
    signature = inspect.signature(target)
    signature.bind(*args, **kwargs)


def test_sandbox_interface_has_the_methods_our_sandbox_implements() -> None:
    from tinker_cookbook.sandbox.sandbox_interface import SandboxInterface

    for name in ("run_command", "read_file", "write_file", "send_heartbeat", "cleanup"):
        assert callable(getattr(SandboxInterface, name))
    assert "sandbox_id" in dir(SandboxInterface)
