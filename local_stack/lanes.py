"""Fair shares go to the clients the stack knows, not to names: made-up names share one lane.

A key names its client, and anyone on the machine can make up keys. Were every name a lane
of its own, a flood spread over 64 made-up names would get 64 turns on the compute thread
for an innocent client's one, and 64 quotas. A name is a lane of its own once a process has
registered it: a kernel, or a script, through the course's `connect` (`local_stack.registry`
lists them). Every other name shares SHARED_LANE with all names like it: one turn on the
compute and decode threads and in the batcher, and one quota under every per-client cap.
What a client owns (runs, files, responses) stays its own; only shares and quotas pool.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from local_stack import registry

logger = logging.getLogger(__name__)

# Not a client name (those are lowercase letters and digits), so no key can name this lane.
SHARED_LANE = "*unregistered"
STACK_LANE = ""  # work no client asked for (loading the model at start)
# How often, at most, the registry is read again to find a name not seen registered. A kernel
# registers before its first request, so it waits at most this long in the shared lane.
REFRESH_SECONDS = 1.0


class Lanes:
    """Which lane a client's requests take, from the names processes have registered."""

    def __init__(
        self,
        registered: Callable[[], set[str]] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`registered()` reads the registered names; without it every name is a lane of
        its own (a server mounted inside a test's process has no registry)."""
        self._read = registered
        self._clock = clock
        self._names: set[str] = set()
        self._read_at = -float("inf")

    @classmethod
    def following(cls, storage_dir: Path) -> Lanes:
        return cls(lambda: registry.live_client_names(storage_dir))

    def of(self, client: str) -> str:
        """`client` itself if it is registered, else the shared lane."""
        return client if self.is_registered(client) else SHARED_LANE

    def is_registered(self, client: str) -> bool:
        if self._read is None or client == STACK_LANE or client in self._names:
            return True
        if self._clock() - self._read_at >= REFRESH_SECONDS:
            self._read_at = self._clock()
            try:
                self._names = self._read()
            except OSError:  # unreadable for now: keep the names read last
                logger.exception("could not read the stack's clients")
        return client in self._names
