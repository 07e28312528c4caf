"""Everything the local stack reads from its surroundings, in one place.

The keys are obviously fake: the stack accepts only these, and they are safe to print. Every
environment variable the stack honours is named here, with its default.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
LOOPBACK_HOSTS = ("127.0.0.1", "localhost")

SAIL_API_KEY = "sk_local_stack"
TINKER_API_KEY = "tml-local-stack"

# Environment variables (all optional).
STORAGE_DIR_VAR = "COURSE_LOCAL_STACK_DIR"  # checkpoints; default runs/local-stack
TORCH_THREADS_VAR = "COURSE_LOCAL_TORCH_THREADS"  # default 1, see torch_threads()
SAIL_LATENCY_VAR = "COURSE_SAIL_LATENCY"  # seconds before a response may report done
SAIL_FAULTS_VAR = "COURSE_SAIL_FAULTS"  # e.g. "failed=0.1,http500=0.05"
SAIL_SEED_VAR = "COURSE_SAIL_SEED"  # seeds sampling and fault draws
TRAIN_LATENCY_VAR = "COURSE_TINKER_TRAIN_LATENCY"  # seconds a Tinker training step takes at least


def storage_dir() -> Path:
    """Where the stack keeps checkpoints; persists across restarts so runs can resume."""
    path = Path(os.environ.get(STORAGE_DIR_VAR) or REPO_ROOT / "runs" / "local-stack")
    path.mkdir(parents=True, exist_ok=True)
    return path


def torch_threads() -> int:
    """One torch thread by default: the model's ops are tiny, and on a two-core machine shared
    with a notebook kernel two threads spin against each other (measured 5-10x slower)."""
    return int(os.environ.get(TORCH_THREADS_VAR, "1"))


def knob_settings_from_env() -> dict[str, str]:
    """The control plane's start-up settings (latencies, faults, seed) as given, unparsed."""
    names = {
        "latency": SAIL_LATENCY_VAR,
        "train_latency": TRAIN_LATENCY_VAR,
        "faults": SAIL_FAULTS_VAR,
        "seed": SAIL_SEED_VAR,
    }
    return {knob: os.environ[var] for knob, var in names.items() if os.environ.get(var)}
