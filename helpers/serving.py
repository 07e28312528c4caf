# Generated from notebooks/02_snapshot_and_serve.ipynb by `make helpers`. Do not edit: change
# the notebook's `# @save` cells, then run `make helpers` again.
"""Snapshot the LoRA weights Tinker is training and serve them through Sail.

Notebook 04 calls `sail_policy` at the start of every training step.
"""

from typing import Any

import sail

# How long one rollout may wait for Sail, by completion window. `balanced` answers promptly,
# so ten minutes means something went wrong. `flex` has no target response time: Sail runs it
# when compute is cheapest, overnight for instance, so a flex rollout may wait for hours.
ROLLOUT_TIMEOUT_S = {"balanced": 600, "flex": 12 * 3600}


class SnapshotCompleter(sail.SailTokenCompleter):
    """A Sail completer that remembers the Tinker checkpoint it samples from.

    Each request carries the checkpoint's signed URL, and Sail fetches the adapter from it.
    When and how often the cloud downloads it, and whether it caches it, is not documented;
    the local Sail downloads it for every request (or burst of concurrent requests) and
    reuses its copy only if the bytes are unchanged. Once the rollouts that use the
    checkpoint are done, the caller can delete it (`checkpoint_path`) instead of waiting for
    its TTL.
    """

    def __init__(self, checkpoint_path: str, **completer_args: Any) -> None:
        super().__init__(**completer_args)
        self.checkpoint_path = checkpoint_path


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
) -> SnapshotCompleter:
    """Save the current weights as sampler checkpoint `name` and return a Sail completer for it.

    Tinker deletes the checkpoint `ttl_seconds` after this call (the save sets the TTL and
    the signed-URL helper sets it again), or sooner if you delete `checkpoint_path`. The
    completer polls Sail for as long as `completion_window` may take (`ROLLOUT_TIMEOUT_S`),
    not the SDK's fixed 20 minutes.
    """
    save_future = await training_client.save_weights_for_sampler_async(
        name, ttl_seconds=ttl_seconds
    )
    save_result = await save_future
    signed_url = await sail.get_tinker_checkpoint_signed_url_async(
        service_client, save_result.path, ttl_seconds=ttl_seconds
    )
    return SnapshotCompleter(
        checkpoint_path=save_result.path,
        model=model_name,
        max_tokens=max_tokens,
        temperature=temperature,
        completion_window=completion_window,
        poll_timeout=ROLLOUT_TIMEOUT_S[completion_window],
        tinker_lora_signed_url=signed_url,
        adapter_config=adapter_config,
        tinker_lora_name=name,
    )
