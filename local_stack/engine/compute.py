"""One worker thread for all model compute in the local stack, taken in turns by client.

Sampling and training share two CPU cores; running them one at a time on a single
thread keeps torch from oversubscribing the cores and keeps the event loop free to
answer HTTP requests (polls, heartbeats) while a batch runs.

The thread is shared by every kernel using the stack, so it is handed out fairly: each
client (the name its key carries) waits in its own queue, and the clients with work take
turns, one job each. A client that queues a thousand jobs delays another client's single
job by one of its jobs, not a thousand. Long work is cut into slices (`run_compute_sliced`),
each its own turn, so that one huge request cannot hold the thread for long either.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# The lane of work no client asked for (loading the model at start).
STACK_CLIENT = ""

_EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-compute")


class _Turns:
    """Round-robin over clients for one event loop: who may use the compute thread next."""

    def __init__(self) -> None:
        self.busy = False
        # client -> its waiting jobs' wake-up futures; the first client is served next, and
        # a client that was just served goes to the back.
        self.waiting: OrderedDict[str, deque[asyncio.Future[None]]] = OrderedDict()

    async def take(self, client: str) -> None:
        """Wait until it is `client`'s turn; the caller must `give_back()` afterwards."""
        if not self.busy:
            self.busy = True
            return
        turn = asyncio.get_running_loop().create_future()
        self.waiting.setdefault(client, deque()).append(turn)
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self.give_back()  # granted just as the waiter went away: pass the turn on
            else:
                queue = self.waiting.get(client)
                if queue is not None and turn in queue:
                    queue.remove(turn)
                    if not queue:
                        del self.waiting[client]
            raise

    def give_back(self) -> None:
        """End the current turn and start the next client's, if anyone waits."""
        while self.waiting:
            client, queue = self.waiting.popitem(last=False)
            turn = queue.popleft()
            if queue:
                self.waiting[client] = queue  # to the back of the line
            if not turn.done():
                turn.set_result(None)
                return
        self.busy = False


_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Turns] = weakref.WeakKeyDictionary()


def _turns() -> _Turns:
    loop = asyncio.get_running_loop()
    if loop not in _TURNS:
        _TURNS[loop] = _Turns()
    return _TURNS[loop]


async def run_compute(fn: Callable[..., T], *args: object, client: str = STACK_CLIENT) -> T:
    """Run `fn(*args)` on the compute thread, in `client`'s turn, and await its result."""
    turns = _turns()
    await turns.take(client)
    try:
        return await asyncio.get_running_loop().run_in_executor(_EXECUTOR, fn, *args)
    finally:
        turns.give_back()


async def run_compute_sliced(work: Generator[None, None, T], *, client: str = STACK_CLIENT) -> T:
    """Run `work` on the compute thread, each step to its next `yield` in a turn of its own.

    Between two slices other jobs may run. They must not touch what `work` is computing on
    (a training run's queue runs one request at a time), so the result is exactly that of
    running `work` in one go.
    """
    while True:
        if finished := await run_compute(_advance, work, client=client):
            return finished[0]


def _advance(work: Generator[None, None, T]) -> list[T]:
    """Run `work` to its next `yield`: [] while it has more to do, then [what it returned]."""
    try:
        next(work)
    except StopIteration as stop:
        return [stop.value]
    return []
