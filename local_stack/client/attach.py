"""A kernel (or script) joining and leaving the local stack: what `helpers.connect("local")`
does, and undoes when the same kernel connects to the cloud. Only this process changes: the
stack keeps serving every other.
"""

from __future__ import annotations

import sys


def join_local_stack() -> dict[str, list[dict]]:
    """Use this storage dir's stack (starting it if no other process has), with the SDKs
    pointed at it and its keys; watch it, so that should it die or hang the running cell (or
    script) stops in one sentence (`local_stack.client.watch`); return the local data's splits
    as rows."""
    from kimi import register_offline_kimi_tokenizer
    from local_stack.client.dataset import arithmetic_dataset
    from local_stack.client.supervisor import start_local_stack
    from local_stack.client.watch import watch_local_stack

    stop_watching()  # the stack may be restarted below, on purpose
    register_offline_kimi_tokenizer()
    stack = start_local_stack()
    watch_local_stack(stack.pid, stack.log_path, stack.url)
    return {name: split.to_list() for name, split in arithmetic_dataset().items()}


def leave_local_stack() -> None:
    """Stop watching the stack and restore the SDK variables it had replaced (the keys and base
    URLs from your shell)."""
    stop_watching()
    if (supervisor := sys.modules.get("local_stack.client.supervisor")) is not None:
        supervisor.detach_local_stack()


def stop_watching() -> None:
    """Stop watching the stack, which is about to be stopped or restarted on purpose, and drop
    a reason whose interruption never reached a cell."""
    if (watch := sys.modules.get("local_stack.client.watch")) is not None:
        watch.stop_watching()
        watch.forget_interrupt_reason()
