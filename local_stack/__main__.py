"""`python -m local_stack [start]` runs the local stack for a human; `serve` is the server."""

from __future__ import annotations

import argparse
import time

from local_stack.config import SAIL_API_KEY, TINKER_API_KEY


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m local_stack", description=__doc__)
    commands = parser.add_subparsers(dest="command")
    serve = commands.add_parser("serve", help="run the server in the foreground")
    serve.add_argument("--port", type=int, default=0, help="0 picks a free port")
    serve.add_argument("--parent-pid", type=int, default=None, help="exit when it dies")
    commands.add_parser("start", help="start the stack and print how to use it (default)")
    args = parser.parse_args()
    if args.command == "serve":
        from local_stack.app import serve as run_server

        run_server(args.port, args.parent_pid)
    else:
        start_for_a_human()


def start_for_a_human() -> None:
    """Start the stack, print the variables to export (fake local keys only), wait for Ctrl-C."""
    from local_stack.supervisor import start_local_stack, stop_local_stack

    stack = start_local_stack()
    print(f"local stack running at {stack.url} (pid {stack.pid}); storage {stack.storage_dir}")
    print(f"its log (warnings, errors): {stack.log_path}")
    print("Sail:   POST /v1/responses, GET /v1/responses/{id}   Tinker: /api/v1/...")
    print("To use it from another shell:")
    print(f"  export SAIL_API_URL={stack.url} SAIL_API_KEY={SAIL_API_KEY}")
    print(f"  export TINKER_BASE_URL={stack.url} TINKER_API_KEY={TINKER_API_KEY}")
    print("  export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost")
    print("Ctrl-C stops it.")
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        stop_local_stack()
        print("local stack stopped")


if __name__ == "__main__":
    main()
