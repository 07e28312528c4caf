"""`python -m local_stack [start|status|stop]` for a human (`make stop` runs `stop`);
`serve` is the server itself, in the foreground."""

from __future__ import annotations

import argparse
import os
import sys

from local_stack.config import SAIL_API_KEY, TINKER_API_KEY


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m local_stack", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="run the server in the foreground")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    commands.add_parser("start", help="start the stack and print how to use it (default)")
    commands.add_parser("status", help="say whether the stack is running")
    commands.add_parser("stop", help="stop the stack, whichever kernel started it")
    args = parser.parse_args()
    if args.command == "serve":
        os.umask(0o077)  # whatever the stack writes (checkpoints, logs) is the user's alone
        refuse_if_served()
        from local_stack.app import serve as run_server

        run_server(args.port)
    elif args.command == "status":
        print_status()
    elif args.command == "stop":
        stop_for_a_human()
    else:
        start_for_a_human()


def refuse_if_served() -> None:
    """Exit with one sentence if a server already serves the storage dir, before importing
    the server (torch, transformers, peft: seconds of CPU). The server's own lock still
    decides a race between two starting now."""
    from local_stack import registry
    from local_stack.config import storage_dir

    running = registry.serving_record(storage_dir())
    if running is not None:
        sys.exit(registry.refusal(storage_dir(), running))


def start_for_a_human() -> None:
    """Start the stack (or find it running) and print the variables to export (fake local
    keys only). It keeps running after this command returns."""
    from local_stack.client.supervisor import ensure_local_stack
    from local_stack.config import idle_seconds

    stack = ensure_local_stack()
    print(f"local stack running at {stack.url} (pid {stack.pid}); storage {stack.storage_dir}")
    print(f"its log (warnings, errors): {stack.log_path}")
    print("Sail:   POST /v1/responses, GET /v1/responses/{id}   Tinker: /api/v1/...")
    print("To use it from another shell:")
    print(f"  export SAIL_API_URL={stack.url} SAIL_API_KEY={SAIL_API_KEY}")
    print(f"  export TINKER_BASE_URL={stack.url} TINKER_API_KEY={TINKER_API_KEY}")
    print("  export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost")
    print(
        f"It stops after {idle_seconds() / 60:g} min with no kernel and no request, "
        "or with `python -m local_stack stop`."
    )


def print_status() -> None:
    from local_stack.client.supervisor import running_local_stack
    from local_stack.config import storage_dir

    stack = running_local_stack()
    state = f"running at {stack.url} (pid {stack.pid})" if stack else "not running"
    print(f"local stack for {storage_dir()}: {state}")


def stop_for_a_human() -> None:
    from local_stack.client.supervisor import stop_local_stack
    from local_stack.config import storage_dir

    pid = stop_local_stack()
    state = f"stopped (pid {pid})" if pid else "was not running"
    print(f"local stack for {storage_dir()}: {state}")


if __name__ == "__main__":
    main()
