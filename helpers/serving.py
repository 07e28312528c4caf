# Generated from notebooks/02_snapshot_and_serve.ipynb by `make helpers`. Do not edit: change
# the `# @save` cells there, then run `make helpers` again.
"""Snapshot the LoRA weights Tinker is training and serve them through Sail.

Notebook 04 calls `sail_policy` at the start of every training step.
"""

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import sail
import tinker

from helpers.errors import CourseRunError

# How long one rollout may wait for Sail, by completion window: `balanced` answers promptly;
# `flex` has no target response time (Sail runs it when compute is cheapest, even overnight).
ROLLOUT_TIMEOUT_S = {"balanced": 600, "flex": 12 * 3600}
# Whenever a rollout starts, its checkpoint and URL have at least its window's budget left,
# plus this margin for its requests (else they are renewed).
LIFETIME_MARGIN_S = 600
# Sail's SDK makes one attempt per request (sail/inference.py), so a rollout tries up to
# SAIL_ATTEMPTS times after a 429, a 5xx or a timeout, waiting a random time up to 1 s, 2 s,
# 4 s... (at most 30 s). No Idempotency-Key is sent: a create that timed out may have run.
SAIL_ATTEMPTS = 4
BACKOFF_S = 1.0
MAX_BACKOFF_S = 30.0
SAIL_REQUEST_TIMEOUT_S = 60.0  # one HTTP request; a background create answers at once


class SailKeyRefusedError(CourseRunError):
    """Sail answered 401 or 403: the key is wrong, revoked, or not allowed this model."""


class CheckpointGoneError(CourseRunError):
    """Sail could not use the checkpoint, and Tinker no longer has it."""


def retry_cause(error: Exception) -> str | None:
    """Why a failed Sail request is worth another try ("429", "5xx" or "timeout"), or None.
    The SDK reports a timeout (or no connection) as a 503 of type "transport_error"."""
    body = getattr(error, "response", None) or {}
    if isinstance(error, sail.TimeoutError | sail.TransportError) or (
        isinstance(body.get("error"), dict) and body["error"].get("type") == "transport_error"
    ):
        return "timeout"
    status = getattr(error, "status_code", None) or 0  # None: a response that ended failed
    return "429" if status == 429 else "5xx" if status >= 500 else None


def backoff_seconds(attempt: int) -> float:
    """How long to wait after failed attempt `attempt` (1, 2, ...): a random time up to
    BACKOFF_S, doubling with each attempt, at most MAX_BACKOFF_S ("full jitter")."""
    return random.uniform(0, min(MAX_BACKOFF_S, BACKOFF_S * 2 ** (attempt - 1)))


def checkpoint_lifetime(completion_window: str, ttl_seconds: int = 0) -> int:
    """`ttl_seconds`, or twice what a rollout in `completion_window` needs if that is longer
    (a completer then renews the TTL only once half of it is gone)."""
    return max(ttl_seconds, 2 * (ROLLOUT_TIMEOUT_S[completion_window] + LIFETIME_MARGIN_S))


class SnapshotCompleter(sail.SailTokenCompleter):
    """A Sail completer that remembers its Tinker checkpoint (`checkpoint_path`), so the
    caller can delete it once its rollouts are done. Sail fetches the adapter from the signed
    URL each request carries (how the cloud caches it is undocumented; the local Sail
    downloads it for every burst of requests). Before each request it renews the TTL and URL
    if a rollout started now could outlive them (by `clock`), and it retries 429s, 5xxs and
    timeouts (`retries` counts them by cause). A refused key, or a checkpoint Tinker no
    longer has, stops it with one sentence."""

    def __init__(
        self,
        checkpoint_path: str,
        service_client: Any,
        ttl_seconds: int,
        clock: Callable[[], float] = time.monotonic,
        **completer_args: Any,
    ) -> None:
        super().__init__(timeout=SAIL_REQUEST_TIMEOUT_S, **completer_args)
        self.checkpoint_path = checkpoint_path
        self.service_client = service_client
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.expires_at = clock() + ttl_seconds  # once the URL is signed, as Tinker counts it
        self.retries: Counter[str] = Counter()
        self.renewals = 0
        self.gone: CheckpointGoneError | None = None
        self._renewing = asyncio.Lock()

    def __repr__(self) -> str:  # what a check prints; never the URL, which works like a password
        kind = self.checkpoint_path.rsplit("/", 2)[-2]
        return (
            f"SnapshotCompleter({kind} checkpoint, model={self.model!r}, "
            f"temperature={self.temperature}, max_tokens={self.max_tokens}, "
            f"window={self.completion_window!r}, ttl_seconds={self.ttl_seconds})"
        )

    async def renew(self, seen: int) -> None:
        """Set the checkpoint's TTL again and sign a new URL, unless another request renewed
        them since this one saw `seen` renewals; one sentence if Tinker no longer has it."""
        async with self._renewing:
            if self.gone is not None:
                raise self.gone
            if self.renewals != seen:
                return
            try:
                self.tinker_lora_signed_url = await sail.get_tinker_checkpoint_signed_url_async(
                    self.service_client, self.checkpoint_path, ttl_seconds=self.ttl_seconds
                )
            except tinker.NotFoundError:
                self.gone = CheckpointGoneError(
                    f"Sail could not sample from {self.checkpoint_path}, and Tinker no longer "
                    "has it: its TTL passed or it was deleted before the rollouts were done."
                )
                raise self.gone from None
            self.expires_at = self.clock() + self.ttl_seconds
            self.renewals += 1

    async def __call__(self, model_input: Any, stop: Any = None) -> Any:
        refused = False
        for attempt in range(1, SAIL_ATTEMPTS + 1):
            if self.clock() + self.poll_timeout + LIFETIME_MARGIN_S > self.expires_at:
                await self.renew(self.renewals)
            seen = self.renewals
            try:
                return await super().__call__(model_input, stop)
            except (sail.InferenceError, sail.TimeoutError, sail.TransportError) as error:
                cause = retry_cause(error)
                status = getattr(error, "status_code", None) or 0
                if status in (401, 403):
                    raise SailKeyRefusedError(
                        f"Sail refused the API key (HTTP {status}); check SAIL_API_KEY or "
                        "run `sail auth login`."
                    ) from None
                if cause is None and 400 <= status < 500 and not refused:
                    # Perhaps Sail could not fetch the adapter: renewing tells whether Tinker
                    # still has it (the error does not say), and if so, one more try.
                    refused, cause = True, "refused"
                    await self.renew(seen)
                if cause is None or attempt == SAIL_ATTEMPTS:
                    raise
                self.retries[cause] += 1
            await asyncio.sleep(backoff_seconds(attempt))
        raise AssertionError("unreachable: the last attempt returns or raises")


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
    lora_name: str | None = None,
) -> SnapshotCompleter:
    """Save the current weights as sampler checkpoint `name` and return a Sail completer for it.

    1. The TTL is `ttl = checkpoint_lifetime(completion_window, ttl_seconds)`: `ttl_seconds`,
       or longer if a rollout in `completion_window` could outlive it. Use it for the save,
       the URL and the completer (which renews both with it).
    2. Save the weights for sampling under `name` with that TTL and wait for the save: two
       awaits, as above. Its result's `path` is the new checkpoint.
    3. Sign a URL for that path: `sail.get_tinker_checkpoint_signed_url_async`, same TTL.
    4. Return `SnapshotCompleter(path, service_client, ttl, **settings)`, whose
       settings are `SailTokenCompleter`'s: `model`, `max_tokens`, `temperature`,
       `completion_window`, `poll_timeout=ROLLOUT_TIMEOUT_S[completion_window]` (not the
       SDK's fixed 20 minutes), `tinker_lora_signed_url`, `adapter_config`, and
       `tinker_lora_name` (`lora_name`, else `name`).
    """
    ttl_seconds = checkpoint_lifetime(completion_window, ttl_seconds)
    save_future = await training_client.save_weights_for_sampler_async(
        name, ttl_seconds=ttl_seconds
    )
    save_result = await save_future
    signed_url = await sail.get_tinker_checkpoint_signed_url_async(
        service_client, save_result.path, ttl_seconds=ttl_seconds
    )
    return SnapshotCompleter(
        save_result.path,
        service_client,
        ttl_seconds,
        model=model_name,
        max_tokens=max_tokens,
        temperature=temperature,
        completion_window=completion_window,
        poll_timeout=ROLLOUT_TIMEOUT_S[completion_window],
        tinker_lora_signed_url=signed_url,
        adapter_config=adapter_config,
        tinker_lora_name=lora_name or name,
    )
