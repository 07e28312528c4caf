"""One worker thread for all model compute in the local stack, taken in turns by client; and
one decoder for request bodies too large to decode on the event loop, taken the same way.

Sampling and training share two CPU cores; running them one at a time on a single
thread keeps torch from oversubscribing the cores and keeps the event loop free to
answer HTTP requests (polls, heartbeats) while a batch runs.

The thread is shared by every kernel using the stack, so it is handed out fairly: each
client (the name its key carries) waits in its own queue, and the clients with work take
turns, one job each. A client that queues a thousand jobs delays another client's single
job by one of its jobs, not a thousand. Long work is cut into slices (`run_compute_sliced`),
each its own turn, so that one huge request cannot hold the thread for long either.

Decoding a large body (a 32 MiB forward_backward takes about a second) on the event loop
would stop every other request meanwhile, `/healthz` included. On a thread it stops nobody's
requests, but protobuf's parser holds the interpreter lock for most of that time, and the
compute thread, which takes the lock back after every torch operation, then sampled ten
times slower (measured). So the server decodes in a child process (`decode_in_a_process`);
elsewhere (a server mounted in a test's own process, or a platform without `fork`) the
decoder is a thread. Bodies of the course's normal size decode on the event loop, where that
costs microseconds and waits behind no one.
"""

from __future__ import annotations

import asyncio
import atexit
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Generator
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Literal, TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")

# The lane of work no client asked for (loading the model at start).
STACK_CLIENT = ""

_PR_SET_PDEATHSIG = 1  # prctl(2)
Worker = Literal["compute", "decode"]
_WORKERS: dict[Worker, Executor] = {
    "compute": ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-compute"),
    "decode": ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-decode"),
}


def decode_in_a_process() -> None:
    """Decode in a child process from now on. The server calls this first thing, while it
    has one thread and holds no socket or lock that the child would inherit. Only where
    `fork` is the platform's way (Linux): a spawned child would load torch all over again."""
    if sys.platform != "linux":
        return
    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("fork"),
        initializer=_die_with_parent,
        initargs=(os.getpid(),),
    )
    pool.submit(int).result()  # fork now, not later from a process with threads
    atexit.register(pool.shutdown)  # while the interpreter is whole: quietly
    _WORKERS["decode"] = pool


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


# Each event loop's turns, one per worker.
_TURNS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Worker, _Turns]] = (
    weakref.WeakKeyDictionary()
)


def _turns(worker: Worker) -> _Turns:
    by_worker = _TURNS.setdefault(asyncio.get_running_loop(), {})
    if worker not in by_worker:
        by_worker[worker] = _Turns()
    return by_worker[worker]


async def run_compute(fn: Callable[..., T], *args: object, client: str = STACK_CLIENT) -> T:
    """Run `fn(*args)` on the compute thread, in `client`'s turn, and await its result."""
    return await _run_in_turn("compute", fn, args, client)


def _die_with_parent(server_pid: int) -> None:
    """In the decode process: be killed when the server exits, however it exits (Linux's
    PR_SET_PDEATHSIG), rather than linger after a killed server, holding its memory."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server_pid:  # the server died before the line above took effect
        os._exit(0)


async def run_decode(fn: Callable[..., T], *args: object, client: str = STACK_CLIENT) -> T:
    """Run `fn(*args)` on the decoder, in `client`'s turn, and await its result. In a child
    process `fn`, its arguments and its result (or exception) must pickle."""
    try:
        return await _run_in_turn("decode", fn, args, client)
    except BrokenProcessPool:
        # The child died (killed, out of memory) during this request, which is not retried:
        # it may be what killed it. Later ones decode on a thread (forking now, from a
        # process with threads, is not safe).
        logger.exception("the decode process died; decoding on a thread from now on")
        _WORKERS["decode"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="local-decode")
        raise RuntimeError("the stack's decode process died while decoding this request") from None


async def _run_in_turn(
    worker: Worker, fn: Callable[..., T], args: tuple[object, ...], client: str
) -> T:
    turns = _turns(worker)
    await turns.take(client)
    try:
        return await asyncio.get_running_loop().run_in_executor(_WORKERS[worker], fn, *args)
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
