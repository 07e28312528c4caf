"""Everything the local stack reads from its surroundings, in one place.

The keys are obviously fake and safe to print. Every environment variable the stack honours
is named here, with its default.
"""

from __future__ import annotations

import os
import re
import secrets
from functools import cache
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")

# A key names its client: `tml-local-<client>` for Tinker, `sk_local_<client>` for Sail. The
# stack keeps each client's runs, files, LoRAs and settings apart, as the real services keep
# one organisation's from another's. Every process that connects gets its own client name
# (`process_client`); the fixed pair below is the client "stack", for a shell pointed at the
# stack by hand (`python -m local_stack`).
TINKER_KEY_PREFIX = "tml-local-"
SAIL_KEY_PREFIX = "sk_local_"
CLIENT_NAME = re.compile(r"[a-z0-9]{1,32}")
SHELL_CLIENT = "stack"
SAIL_API_KEY = SAIL_KEY_PREFIX + SHELL_CLIENT
TINKER_API_KEY = TINKER_KEY_PREFIX + SHELL_CLIENT

# Environment variables (all optional).
STORAGE_DIR_VAR = "COURSE_LOCAL_STACK_DIR"  # checkpoints; default runs/local-stack
TORCH_THREADS_VAR = "COURSE_LOCAL_TORCH_THREADS"  # default 1, see torch_threads()
SAIL_LATENCY_VAR = "COURSE_SAIL_LATENCY"  # seconds before a response may report done
SAIL_FAULTS_VAR = "COURSE_SAIL_FAULTS"  # e.g. "failed=0.1,http500=0.05"
SAIL_SEED_VAR = "COURSE_SAIL_SEED"  # seeds sampling and fault draws
TRAIN_LATENCY_VAR = "COURSE_TINKER_TRAIN_LATENCY"  # seconds a Tinker training step takes at least
IDLE_MINUTES_VAR = "COURSE_LOCAL_STACK_IDLE_MINUTES"  # default 30, see idle_seconds()

# One stack serves every process that uses a storage dir; these files in that dir find it.
STACK_RECORD_FILE = "stack.json"  # {"url", "pid", ...} of the running stack
STACK_LOCK_FILE = "stack.lock"  # held while a stack is being found, started or stopped
STACK_SERVING_FILE = "stack.serving"  # locked by the running server for its life: its URL, pid
STACK_LOG_FILE = "stack.log"  # the running stack's stderr (it outlives any terminal)
STACK_CLIENTS_DIR = "clients"  # one file per process using the stack, named by its pid
STACK_DEPARTED_DIR = "departed"  # one file per client that has left, until the stack releases it
DEFAULT_IDLE_MINUTES = 30.0


def storage_dir() -> Path:
    """Where the stack keeps checkpoints; persists across restarts so runs can resume.

    Absolute, because it also names the stack that serves it, for processes whose working
    directories differ (a kernel in notebooks/, the stack in the repo root)."""
    path = Path(os.environ.get(STORAGE_DIR_VAR) or REPO_ROOT / "runs" / "local-stack").resolve()
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)  # private: other accounts must not read model ids or checkpoints
    return path


def torch_threads() -> int:
    """One torch thread by default: the model's ops are tiny, and on a two-core machine shared
    with a notebook kernel two threads spin against each other (measured 5-10x slower)."""
    return int(os.environ.get(TORCH_THREADS_VAR, "1"))


def idle_seconds() -> float:
    """How long the stack waits, once no process uses it and no request has come, before it
    exits by itself: long enough to outlive a kernel restart or a short break."""
    return 60 * float(os.environ.get(IDLE_MINUTES_VAR) or DEFAULT_IDLE_MINUTES)


def knob_settings_from_env() -> dict[str, str]:
    """The control plane's start-up settings (latencies, faults, seed) as given, unparsed."""
    names = {
        "latency": SAIL_LATENCY_VAR,
        "train_latency": TRAIN_LATENCY_VAR,
        "faults": SAIL_FAULTS_VAR,
        "seed": SAIL_SEED_VAR,
    }
    return {knob: os.environ[var] for knob, var in names.items() if os.environ.get(var)}


def stack_settings() -> dict[str, str]:
    """What a stack is started with and must match to be reused: knobs and torch threads."""
    return {**knob_settings_from_env(), "torch_threads": str(torch_threads())}


def client_keys(client: str) -> dict[str, str]:
    """The Tinker and Sail keys that name `client`."""
    if not CLIENT_NAME.fullmatch(client):
        raise ValueError(f"a client name is 1-32 lowercase letters or digits, not {client!r}")
    return {"TINKER_API_KEY": TINKER_KEY_PREFIX + client, "SAIL_API_KEY": SAIL_KEY_PREFIX + client}


def client_from_key(key: str, prefix: str) -> str | None:
    """The client a key names, or None if it is not one of the local stack's keys."""
    client = key.removeprefix(prefix)
    if client == key or not CLIENT_NAME.fullmatch(client):
        return None
    return client


@cache
def process_client() -> str:
    """This process's client name: random, so no other process can guess it, and the same for
    the process's whole life, so a kernel that reconnects still owns what it created."""
    return secrets.token_hex(8)
