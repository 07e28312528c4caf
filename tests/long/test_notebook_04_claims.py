"""What notebooks 04, 05 and 10 claim of runs at their defaults, checked on the executed
notebooks rather than by asserts in them: each claim is about random runs, so a learner who
changes a seed must never meet an AssertionError over it. Each notebook runs once, with every
parameter at its default (05 on 04's run) and a probe cell appended that prints the values
each claim is about.

10's paid counts (the guide's grader pays skips, the fixed one none) are checked by
tests/long/test_loophole.py; its skip rate under the fixed grader is checked here.
"""

from __future__ import annotations

import nbformat
import pytest

from local_stack.client.supervisor import stop_local_stack
from tests.notebook_support import error_outputs, finish, kernel_env, papermill, probe, with_probe

MIN_STEPS = 60  # the claims are made of runs of at least this many steps
RUN_TIMEOUT_S = 3600  # a whole default notebook on a busy shared machine

# Run in each notebook's namespace after its last cell: each claim's values, as plain JSON.
PROBES = {
    "04_training_loop.ipynb": """
checked = {
    "backend": course.backend,
    "completed": len(records),
    "temperature": cfg.temperature,
    "groups": [cfg.group_size, cfg.groups_per_step],
    "weights_trained": not weights.empty,
    "largest_weight_gap": None if weights.empty else float(largest),
}
""",
    "05_did_it_learn.ipynb": """
checked = {
    "format_gain_low": {
        name: float(comparison["format"]["gain_interval"][0])
        for name, comparison in comparisons.items()
    },
    "pass_at_k_measured": bool(pass_at_k_sets),
    "known_pass_at_16": {
        key: float(gains["known facts, not trained"][key][-1]) for key in ("value", "low")
    } if pass_at_k_sets else None,
}
""",
    "10_reward_hacking.ipynb": """
checked = {
    "loophole_steps": loophole.get("steps"),
    "loophole_groups": [loop.group_size, loop.groups_per_step],
    "skip_rate_moved": moved,
}
""",
}

pytestmark = pytest.mark.timeout(3 * RUN_TIMEOUT_S + 300)


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The probes' values from one run of each notebook at its defaults, on a stack of their
    own, in order (05 evaluates 04's run)."""
    folder = tmp_path_factory.mktemp("defaults")
    env = kernel_env(folder)
    values: dict = {}
    try:
        for name, code in PROBES.items():
            notebook = with_probe(name, folder, "checked", steps=code)
            out = folder / f"out-{name}"
            returned, log = finish(papermill(str(notebook), out, {}, env), RUN_TIMEOUT_S)
            assert returned == 0, log[-3000:]
            executed = nbformat.read(out, as_version=4)
            assert not error_outputs(executed)
            values |= probe(executed)
    finally:
        stop_local_stack(folder / "stack")
    return values


def test_the_held_out_format_rate_rises_on_every_set(checked: dict) -> None:
    """After 60 steps or more, locally, the held-out format rate rose beyond its interval."""
    assert checked["completed"] >= MIN_STEPS
    flat = {name: low for name, low in checked["format_gain_low"].items() if low <= 0}
    assert not flat, f"the held-out format rate did not rise (interval from): {flat}"


def test_pass_at_16_on_known_facts_does_not_rise(checked: dict) -> None:
    """pass@16, which the base model had all but maxed, did not rise beyond its interval (it
    may fall). pass@1's gain may sit inside its noise, so the notebook renders it and no test
    asserts it."""
    assert checked["pass_at_k_measured"] and checked["completed"] >= MIN_STEPS
    known = checked["known_pass_at_16"]
    assert known["low"] <= 0, f"pass@16 on known facts rose by {known['value']:+.3f}"


def test_the_local_importance_weights_are_one_at_temperature_1(checked: dict) -> None:
    """Locally at temperature 1 the sampler and the learner hold the same weights, so every
    importance weight is 1 up to float rounding."""
    assert checked["backend"] == "local" and checked["temperature"] == 1
    assert checked["weights_trained"]
    assert checked["largest_weight_gap"] < 1e-3, "the local Sail and Tinker disagree"


def test_the_fixed_grader_does_not_let_skipping_grow(checked: dict) -> None:
    """In 10's 60 steps or more of 8 groups of 8, the skip rate under the fixed grader, which
    pays no skip, did not rise."""
    assert checked["loophole_steps"] >= MIN_STEPS and checked["loophole_groups"] == [8, 8]
    assert checked["skip_rate_moved"]["fixed grader"] != "rose"
