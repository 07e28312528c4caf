# Generated from notebooks/02_snapshot_and_serve.ipynb by `make helpers`. Do not edit: change
# the notebook's `# @save` cells, then run `make helpers` again.
"""Snapshot the LoRA weights Tinker is training and serve them through Sail.

Notebook 03 calls `sail_policy` at the start of every training step.
"""

from typing import Any

import sail


async def sail_policy(
    training_client: Any,
    service_client: Any,
    adapter_config: dict,
    name: str,
    *,
    model_name: str,
    max_tokens: int,
    temperature: float,
    completion_window: str = "balanced",
    ttl_seconds: int = 3600,
) -> sail.SailTokenCompleter:
    """Save the current weights as sampler checkpoint `name` and return a Sail completer for it.

    The checkpoint and its signed URL expire after `ttl_seconds`, so one checkpoint per
    step does not pile up in storage.
    """
    save_future = await training_client.save_weights_for_sampler_async(
        name, ttl_seconds=ttl_seconds
    )
    save_result = await save_future
    signed_url = await sail.get_tinker_checkpoint_signed_url_async(
        service_client, save_result.path, ttl_seconds=ttl_seconds
    )
    return sail.SailTokenCompleter(
        model=model_name,
        max_tokens=max_tokens,
        temperature=temperature,
        completion_window=completion_window,
        tinker_lora_signed_url=signed_url,
        adapter_config=adapter_config,
        tinker_lora_name=name,
    )
