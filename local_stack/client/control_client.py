"""Calls to the control plane, for tests, benchmarks, and notebooks that simulate cloud latency."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from local_stack.client.supervisor import start_local_stack
from local_stack.config import SAIL_API_KEY, SAIL_KEY_PREFIX

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def set_knobs(url: str, **changes: Any) -> dict[str, Any]:
    """Change this process's knobs (`latency`, `train_latency`, `faults`; `seed` is the
    stack's, see `local_stack.control.knobs`); returns all that its requests now get."""
    return _call(url, "/local/config", changes)


def get_knobs(url: str) -> dict[str, Any]:
    return _call(url, "/local/config")


def reset_knobs(url: str) -> dict[str, Any]:
    """This process's requests get the stack's start-up settings again; returns them."""
    return _call(url, "/local/config", method="DELETE")


def simulate_latency(refused: type[Exception] = ValueError, **knobs: float) -> None:
    """Make the local stack wait as the cloud would: `latency` is how long a Sail response
    reports `in_progress`, `train_latency` the least a Tinker training step takes
    (`local_stack.control.knobs`). They apply to this process's requests only, until
    `simulated_latency` ends or the process exits; the real services have no such setting.
    A value the stack refuses changes nothing and raises `refused` with the stack's sentence,
    which names the knob and its range."""
    try:
        set_knobs(start_local_stack().url, **knobs)  # `connect` started it: this finds it
    except ValueError as error:
        raise refused(str(error)) from None


@contextmanager
def simulated_latency(refused: type[Exception] = ValueError, **knobs: float) -> Iterator[None]:
    """`simulate_latency` for the `with` block, then the stack's own settings again, however
    the block ends."""
    try:
        simulate_latency(refused, **knobs)
        yield
    finally:
        reset_knobs(start_local_stack().url)


def get_stats(url: str) -> dict[str, Any]:
    """Counters: Sail's `batches`, `requests`, `largest_batch`, `split_batches`."""
    return _call(url, "/local/stats")


def _call(
    url: str, route: str, body: dict[str, Any] | None = None, method: str | None = None
) -> dict[str, Any]:
    request = urllib.request.Request(
        url.rstrip("/") + route,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {_key()}", "Content-Type": "application/json"},
        method=method,
    )
    try:
        with _NO_PROXY.open(request, timeout=30) as reply:
            return json.load(reply)
    except urllib.error.HTTPError as error:
        if 400 <= error.code < 500:  # a knob out of range: the stack's one sentence says which
            try:
                message = json.load(error)["error"]["message"]
            except (ValueError, KeyError, TypeError):  # not the control plane's JSON error
                raise error from None
            raise ValueError(message) from None
        raise


def _key() -> str:
    """This process's Sail key while it uses the local stack (`connect` set it), else the
    shell client's: the control plane answers each client about its own settings."""
    key = os.environ.get("SAIL_API_KEY", "")
    return key if key.startswith(SAIL_KEY_PREFIX) else SAIL_API_KEY
