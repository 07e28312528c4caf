"""Every notebook parameter, declared once: its value, its rule, its backend defaults, its doc.

A notebook's parameters cell, the call in its check cell, and the parameter tables of
docs/cloud.md and the instructor's guide are all written from `NOTEBOOK_PARAMETERS` by `make docs`
(`scripts/make_docs.py`); `tests/repo/test_docs_fresh.py` fails when they were not. To change a
default, a range or a description, change it here and run `make docs`.

A parameter whose value is None takes its backend's default (`local`, `cloud`). Within a
notebook, learner-facing parameters come first and cloud-only and budget knobs last, which is
the order of each cell. Imports nothing heavy: the check cells use it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from helpers.params import (
    BACKENDS,
    HELD_OUT_METRICS,
    HELD_OUT_PROBLEMS,
    MAX_GROUP_SIZE,
    MAX_ROLLOUTS_PER_BATCH,
    MAX_TTL_SECONDS,
    MIN_TTL_SECONDS,
    PIPELINE_STEPS,
    RUN_PATTERN,
    SIMULATED_SECONDS,
    STEPS,
    TRAIN_PROBLEMS,
    Matches,
    Number,
    OneOf,
    Rule,
    Whole,
    backend_with_keys,
    completion_window,
    fewer_than_steps,
    max_tokens,
    problems,
    run_name,
    temperature,
)


@dataclass(frozen=True)
class Parameter:
    """One parameter of one notebook: the parameters cell's `value`, the `rule` it must
    pass, what None stands for on each backend, and `doc`, one line on what it does (its
    range is added from the rule)."""

    value: object
    rule: Rule
    doc: str
    local: object = None
    cloud: object = None

    def default(self, backend: str) -> object:
        """What the notebook uses when the value is None on `backend`."""
        return {"local": self.local, "cloud": self.cloud}[backend]

    def comment(self) -> str:
        """The parameters cell's comment: what it does, its range, what None stands for."""
        described = self.rule.describe() if hasattr(self.rule, "describe") else ""
        text = f"{self.doc}: {described}" if described else self.doc
        if self.local is not None or self.cloud is not None:
            text += f"; None: {_literal(self.local)} locally, {_literal(self.cloud)} in the cloud"
        return text


def _literal(value: object) -> str:
    """A default as prose: 1,024; 1e-4 rather than 0.0001."""
    if isinstance(value, float) and 0 < value < 1e-3:
        mantissa, exponent = f"{value:e}".split("e")
        return f"{float(mantissa):g}e{int(exponent)}"
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else f"{value}"


def _with(parameter: Parameter, **changes: object) -> Parameter:
    return replace(parameter, **changes)


# Shared declarations: a notebook takes one as it is, or changes its value or doc with `_with`.
BACKEND = Parameter(
    "local",
    backend_with_keys,
    '"local" needs nothing; "cloud" reads TINKER_API_KEY and SAIL_API_KEY',
)
MAX_TOKENS = Parameter(None, max_tokens, "tokens a completion may have", local=24, cloud=1024)
TEMPERATURE = Parameter(1.0, temperature, "sampling temperature")
COMPLETION_WINDOW = Parameter("balanced", completion_window, "Sail's completion window")
SEED = Parameter(0, Whole(0, 2**32 - 1), "picks the problems")
GROUP_SIZE = Parameter(8, Whole(2, MAX_GROUP_SIZE), "samples per problem (GRPO compares them)")
GROUPS_PER_STEP = Parameter(
    8,
    problems(TRAIN_PROBLEMS, "training"),
    f"problems per step (times group_size: at most {MAX_ROLLOUTS_PER_BATCH} rollouts at once)",
)
# The tiny local model, ~100k parameters, takes 1e-3. Kimi K2.6's LoRA rate is the pinned
# cookbook's recommendation (`tinker_cookbook/weights/README.md`: about 5e-4, which
# `hyperparam_utils.get_lr` does not yet calibrate for it); the guide's 1e-5 is a full
# fine-tuning scale, at which 7 steps barely move an adapter.
LEARNING_RATE = Parameter(
    None, Number(0.0, 1.0, above_low=True, none_ok=True), "Adam's step size", 1e-3, 5e-4
)
EVAL_PROBLEMS = Parameter(
    None,
    problems(HELD_OUT_PROBLEMS, "held-out", none_ok=True),
    "held-out problems scored before and after training",
    local=100,
    cloud=50,
)
EVAL_SAMPLES = Parameter(
    None,
    Whole(1, MAX_GROUP_SIZE, none_ok=True),
    f"samples per held-out problem (times eval_problems: at most {MAX_ROLLOUTS_PER_BATCH})",
    local=4,
    cloud=2,
)
EXAMPLE_INDEX = Parameter(
    0, problems(TRAIN_PROBLEMS, "training", index=True), "which training problem to use"
)
RUN_NAME = Parameter(
    "arithmetic", run_name, "runs/<run_name>/ holds the run's metrics, figures and resume state"
)
BUDGET = Parameter(
    1_000_000,
    Whole(0, 10**12),
    "cloud only: the most tokens the notebook may sample; it stops before its first request "
    "if its estimate is larger",
)

NOTEBOOK_PARAMETERS: dict[str, dict[str, Parameter]] = {
    "01_scoring": {
        "backend": BACKEND,
        "example_index": _with(EXAMPLE_INDEX, doc="which training problem to render below"),
        "group_size": Parameter(
            4,
            Whole(1, MAX_GROUP_SIZE),  # no rollouts to compare here: a group of one is fine
            "how many environments the group builder makes for one problem",
        ),
    },
    "02_snapshot_and_serve": {
        "backend": BACKEND,
        "example_index": _with(EXAMPLE_INDEX, doc="which training problem to sample"),
        "group_size": Parameter(4, Whole(1, MAX_GROUP_SIZE), "samples of the same problem"),
        "temperature": TEMPERATURE,
        "max_tokens": MAX_TOKENS,
        "completion_window": COMPLETION_WINDOW,
        "ttl_seconds": Parameter(
            3600,
            Whole(MIN_TTL_SECONDS, MAX_TTL_SECONDS, why="1 hour to 10 years"),
            "how long the checkpoint and its URL live, in seconds",
        ),
        "budget_sampled_tokens": BUDGET,
    },
    "03_one_grpo_step": {
        "backend": BACKEND,
        "seed": _with(SEED, doc="picks the problems and the new adapter's initial weights"),
        "groups": _with(GROUPS_PER_STEP, value=16, doc="problems in the step, a group each"),
        "group_size": GROUP_SIZE,
        "learning_rate": _with(LEARNING_RATE, local=1e-4),
        "temperature": TEMPERATURE,
        "max_tokens": MAX_TOKENS,
        "budget_sampled_tokens": BUDGET,
    },
    "04_training_loop": {
        "backend": BACKEND,
        "run_name": RUN_NAME,  # every exercise sets a new one
        "steps": Parameter(None, STEPS, "optimizer steps", local=90, cloud=7),
        "group_size": GROUP_SIZE,
        "groups_per_step": GROUPS_PER_STEP,
        "learning_rate": LEARNING_RATE,
        "temperature": TEMPERATURE,
        "max_tokens": MAX_TOKENS,
        "seed": _with(SEED, doc="picks each step's problems and the held-out ones"),
        "eval_problems": EVAL_PROBLEMS,
        "eval_samples": EVAL_SAMPLES,
        "loophole_steps": Parameter(
            60,
            Whole(0, 10_000),
            "the optional reward-hacking section's two runs, in steps each: local only, and "
            "only when at most `steps` (0 skips it; 60 take two to four minutes on a two-core "
            "laptop)",
        ),
        "completion_window": COMPLETION_WINDOW,
        "budget_sampled_tokens": _with(BUDGET, doc=BUDGET.doc + ", and mid-run once it has"),
    },
    "05_compare_runs": {
        "backend": Parameter("local", OneOf(BACKENDS), "compare the runs made on this backend"),
        "runs": Parameter(
            "sweep-*",
            Matches(
                rf"\s*{RUN_PATTERN}(\s+{RUN_PATTERN}){{0,63}}\s*",
                "1 to 64 run names or glob patterns separated by spaces, each made of letters, "
                "digits, '.', '_', '-', '*', '?', '[' and ']' (they match folder names under "
                "runs/)",
            ),
            "the runs to compare (make sweep's are sweep-*)",
        ),
        "metric": Parameter("reward", OneOf(HELD_OUT_METRICS), "the held-out score"),
        "smoothing": Parameter(
            5, Whole(1, 100), "training curves: mean over the last this many steps (1: raw)"
        ),
    },
    "06_faster_loops": {
        "backend": BACKEND,
        "steps": Parameter(
            None, PIPELINE_STEPS, "optimizer steps per run (the first fills the pipeline)", 8, 5
        ),
        "group_size": GROUP_SIZE,
        "groups_per_step": _with(GROUPS_PER_STEP, value=4),
        "max_staleness": Parameter(
            3, fewer_than_steps, "k of the third run: batches in flight, and their age in steps"
        ),
        "learning_rate": LEARNING_RATE,
        "temperature": TEMPERATURE,
        "max_tokens": MAX_TOKENS,
        "seed": _with(SEED, doc="picks each step's problems (the same in every run)"),
        "flex_steps": Parameter(
            None, PIPELINE_STEPS, "steps of the extra run in the flex window", 5, 4
        ),
        "eval_problems": _with(
            EVAL_PROBLEMS, doc="held-out problems scored per model", local=60, cloud=25
        ),
        "eval_samples": EVAL_SAMPLES,
        "run_name": _with(RUN_NAME, value="faster-loops"),
        "balanced_latency_s": Parameter(
            2.0, SIMULATED_SECONDS, "local only: simulated seconds a balanced rollout takes"
        ),
        "flex_latency_s": Parameter(
            5.0, SIMULATED_SECONDS, "local only: simulated seconds a flex rollout takes"
        ),
        "train_latency_s": Parameter(
            2.0, SIMULATED_SECONDS, "local only: simulated seconds a training step takes"
        ),
        "budget_sampled_tokens": BUDGET,
    },
    "07_sandboxed_rollouts": {
        "backend": BACKEND,
        "steps": Parameter(None, STEPS, "optimizer steps", local=15, cloud=3),
        "group_size": Parameter(
            8, Whole(2, 16), "rollouts (and sandboxes) per task; GRPO compares them"
        ),
        "groups_per_step": Parameter(8, Whole(1, 64), "shell tasks per step, a group each"),
        "learning_rate": _with(LEARNING_RATE, local=2e-3),
        "temperature": TEMPERATURE,
        "max_tokens": Parameter(
            None,
            max_tokens,
            "tokens a reply may have (Kimi K2.6 thinks before it writes its script)",
            local=40,
            cloud=1024,
        ),
        "seed": _with(SEED, doc="picks the training tasks and the new adapter's initial weights"),
        "eval_tasks": Parameter(
            None,
            Whole(1, 256, none_ok=True),
            "held-out tasks scored before and after training",
            local=48,
            cloud=8,
        ),
        "eval_samples": Parameter(
            None, Whole(1, 16, none_ok=True), "samples per held-out task", local=4, cloud=2
        ),
        "run_name": _with(
            RUN_NAME,
            value="sandboxed-shell",
            doc="runs/<run_name>/ holds the run's metrics and task folders; a rerun starts it "
            "again",
        ),
        "simulated_boot_seconds": Parameter(
            0.5, SIMULATED_SECONDS, "local only: stands in for a Sailbox's start-up time"
        ),
        "budget_sampled_tokens": BUDGET,
    },
    "08_ship_the_adapter": {
        "backend": BACKEND,
        "run_name": _with(RUN_NAME, doc="the notebook 04 run to ship"),
        "short_run_steps": Parameter(
            None, STEPS, "trained here only if that run does not exist", 12, 7
        ),
        "parity_problems": Parameter(4, Whole(1, 64), "held-out problems for the parity check"),
        "table_problems": Parameter(
            8, Whole(1, HELD_OUT_PROBLEMS["cloud"]), "held-out problems in the before/after table"
        ),
        "max_tokens": MAX_TOKENS,
        "seed": _with(SEED, doc="picks the held-out problems"),
        "lora_name": Parameter(
            None,
            Matches(
                r"[a-z0-9][a-z0-9-]{0,62}[a-z0-9]",
                "2-64 characters of a-z, 0-9 and '-', starting and ending with a letter or "
                "digit (Sail's rule for LoRA names)",
                none_ok=True,
            ),
            "the LoRA's name on Sail; None: <lora_prefix>-<your user name>-<random>, so attendees "
            "sharing a Sail organisation never collide",
        ),
        # A made-up name adds '-<user, up to 20>-<8 hex>': 20 characters leave room in 64.
        "lora_prefix": Parameter(
            "course",
            Matches(
                r"[a-z0-9][a-z0-9-]{0,19}",
                "1-20 characters of a-z, 0-9 and '-', starting with a letter or digit",
            ),
            "how a made-up lora_name starts",
        ),
        "keep_on_sail": Parameter(False, OneOf((True, False)), "leave the LoRA on Sail at the end"),
        "budget_sampled_tokens": BUDGET,
    },
}
