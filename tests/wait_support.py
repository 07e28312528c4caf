"""Waiting for something another process does, with a bound against hangs only: giving up
after `give_up_after` seconds fails the test as a hang, not as a claim about speed (how fast
things are is `make bench`'s)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest


def wait_until(
    condition: Callable[[], bool], what: str, give_up_after: float = 300, poll: float = 0.2
) -> None:
    """Return once `condition()` holds; fail the test if it still does not after the bound."""
    give_up_at = time.monotonic() + give_up_after
    while not condition():
        if time.monotonic() > give_up_at:
            pytest.fail(f"gave up after {give_up_after:g} s waiting for {what}: it hangs")
        time.sleep(poll)
