"""Each notebook's parameters as the parameter tests check them: a valid value of every
parameter, and per parameter the accepted edges and refused values of its range."""

from __future__ import annotations

from helpers import params

NAN, INF = float("nan"), float("inf")
# Values that are no number at all, or not a whole one, refused by every numeric check.
NOT_WHOLE = [NAN, INF, True, "3", 2.5]
NOT_NUMBERS = [NAN, INF, -INF, True, "1", [1]]

# notebook: (valid values of all its parameters, {parameter: (accepted edges, refused values)})
NOTEBOOKS: dict[str, tuple[dict, dict[str, tuple[list, list]]]] = {
    "01_scoring.ipynb": (
        {"backend": "local", "example_index": 0, "group_size": 4},
        {
            "example_index": ([0, 1073], [-1, 1074, *NOT_WHOLE]),
            "group_size": ([1, 64], [0, 65, 1_000_000, *NOT_WHOLE]),
        },
    ),
    "02_snapshot_and_serve.ipynb": (
        {
            "backend": "local",
            "ttl_seconds": 3600,
            "group_size": 4,
            "max_tokens": None,
            "temperature": 1.0,
            "completion_window": "balanced",
            "example_index": 0,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "ttl_seconds": ([3600, 315_360_000], [3599, 315_360_001, None, *NOT_WHOLE]),
            "group_size": ([1, 64], [0, 65, *NOT_WHOLE]),
            "max_tokens": ([None, 1, 256], [0, 257, 1024, *NOT_WHOLE]),
            "temperature": ([0, 0.0, 0.01, 2, 2.0], [-0.01, 0.001, 2.01, 5, *NOT_NUMBERS]),
            "completion_window": (["balanced", "flex"], ["asap", "priority", "15m", None]),
            "example_index": ([0, 1073], [-1, 1074, *NOT_WHOLE]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "04_training_loop.ipynb": (
        {
            "backend": "local",
            "steps": 3,
            "group_size": 2,
            "groups_per_step": 4,
            "learning_rate": None,
            "max_tokens": None,
            "temperature": 1.0,
            "seed": 0,
            "completion_window": "balanced",
            "run_name": "run",
            "eval_problems": 10,
            "eval_samples": 1,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "steps": ([None, 1, 10_000], [0, 10_001, *NOT_WHOLE]),
            "group_size": ([2, 64], [1, 0, 65, 1_000_000, *NOT_WHOLE]),
            "groups_per_step": ([1, 1074], [0, 1075, 5000, *NOT_WHOLE]),
            "learning_rate": ([None, 1e-9, 1, 1.0], [0, -1e-3, 1.01, *NOT_NUMBERS]),
            "max_tokens": ([None, 1, 256], [0, 257, *NOT_WHOLE]),
            "temperature": ([0, 0.01, 2], [-0.01, 0.005, 2.01, 5, *NOT_NUMBERS]),
            "seed": ([0, 2**32 - 1], [-1, 2**32, *NOT_WHOLE]),
            "completion_window": (["balanced", "flex"], ["asap", "priority", None]),
            "run_name": (["a", "a" * 64, "run-1.b_2"], ["", "a" * 65, "../up", "a b", None, 3]),
            "eval_problems": ([None, 1, 399], [0, 400, *NOT_WHOLE]),
            "eval_samples": ([None, 1, 64], [0, 65, *NOT_WHOLE]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "05_did_it_learn.ipynb": (
        {
            "backend": "local",
            "run_name": "run",
            "pass_at_k_problems": 20,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "pass_at_k_problems": ([0, 399], [-1, 400, None, *NOT_WHOLE]),
            "run_name": (["a", "a" * 64, "run-1.b_2"], ["", "a" * 65, "../up", "a b", None, 3]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "10_reward_hacking.ipynb": (
        {"backend": "local", "run_name": "loophole", "loophole_steps": 0},
        {"loophole_steps": ([0, 60, 10_000], [-1, 10_001, None, *NOT_WHOLE])},
    ),
    "08_sandboxed_rollouts.ipynb": (
        {
            "backend": "local",
            "steps": None,
            "group_size": 8,
            "groups_per_step": 8,
            "learning_rate": None,
            "seed": 0,
            "run_name": "sandboxed-shell",
            "eval_tasks": None,
            "eval_samples": None,
            "simulated_boot_seconds": 0.5,
            "temperature": 1.0,
            "max_tokens": None,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "steps": ([None, 1, 10_000], [0, 10_001, *NOT_WHOLE]),
            "group_size": ([2, 16], [1, 17, 64, *NOT_WHOLE]),
            "groups_per_step": ([1, 64], [0, 65, *NOT_WHOLE]),
            "learning_rate": ([None, 1e-9, 1], [0, -1e-3, 1.01, *NOT_NUMBERS]),
            "seed": ([0, 2**32 - 1], [-1, 2**32, *NOT_WHOLE]),
            "run_name": (["a", "a" * 64], ["", "a" * 65, "../up", None]),
            "eval_tasks": ([None, 1, 256], [0, 257, *NOT_WHOLE]),
            "eval_samples": ([None, 1, 16], [0, 17, *NOT_WHOLE]),
            "simulated_boot_seconds": ([0, 0.0, 60], [-0.1, 60.1, *NOT_NUMBERS]),
            "max_tokens": ([None, 1, 256], [0, 257, *NOT_WHOLE]),
            "temperature": ([0, 0.01, 2], [-0.01, 0.005, 2.01, *NOT_NUMBERS]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "07_faster_loops.ipynb": (
        {
            "backend": "local",
            "steps": None,
            "group_size": 8,
            "groups_per_step": 4,
            "max_staleness": 2,
            "learning_rate": None,
            "max_tokens": None,
            "temperature": 1.0,
            "seed": 0,
            "balanced_latency_s": 1.0,
            "flex_latency_s": 2.5,
            "flex_steps": None,
            "train_latency_s": 1.0,
            "train_problems": 16,
            "eval_samples": 1,  # so that all 1,074 problems stay within the rollouts in flight
            "run_name": "faster-loops",
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "steps": ([None, 3, 10_000], [2, 10_001, *NOT_WHOLE]),
            "flex_steps": ([None, 3, 10_000], [2, 10_001, *NOT_WHOLE]),
            # at least groups_per_step (4 here): a step draws that many of them
            "train_problems": ([4, 1074], [3, 1075, None, *NOT_WHOLE]),
            "eval_samples": ([None, 1, 64], [0, 65, *NOT_WHOLE]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "09_ship_the_adapter.ipynb": (
        {
            "backend": "local",
            "run_name": "arithmetic",
            "short_run_steps": None,
            "lora_name": None,
            "lora_prefix": "course",
            "parity_problems": 4,
            "eval_problems": 50,  # its 393 by default times eval_samples = 64 is over 4,096
            "eval_samples": None,
            "max_tokens": None,
            "seed": 0,
            "keep_on_sail": False,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "short_run_steps": ([None, 1, 10_000], [0, 10_001, *NOT_WHOLE]),
            "eval_problems": ([None, 1, 393], [0, 394, *NOT_WHOLE]),
            "eval_samples": ([None, 1, 64], [0, 65, *NOT_WHOLE]),
            "lora_name": ([None, "ab", "a" * 64, "a-1"], ["a", "a" * 65, "Course_Adapter", "-ab"]),
            "lora_prefix": (["c", "a" * 20, "my-team"], ["", "a" * 21, "Course", "-x", None]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "06_compare_runs.ipynb": (
        {"backend": "local", "runs": "sweep-*", "metric": "reward", "smoothing": 5},
        {
            "runs": (
                ["a", "sweep-* arithmetic", "run[01]-?", "a" * 64, " ".join(["a"] * 64)],
                ["", " ", "../up", "a/b", "a" * 65, " ".join(["a"] * 65), None, 3],
            ),
            "metric": (list(params.HELD_OUT_METRICS), ["accuracy", "", None]),
            "smoothing": ([1, 100], [0, 101, *NOT_WHOLE]),
        },
    ),
}
