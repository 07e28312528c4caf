"""Every notebook parameter, declared once: its value, rule, doc and backend defaults; and
each notebook's sizes in the named profiles (`SIZES`) that tests, the rehearsal, the sweeps
and the scripts ask for by name (`resolve(notebook, backend, size)`).

A notebook's check cell is `cfg = helpers.settings(notebook, globals())`; `make docs` writes
the parameters cells and the docs' tables from `NOTEBOOK_PARAMETERS` (learner-facing
parameters first, cloud-only and budget knobs last). The rules are `helpers.params`, a leaf.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, make_dataclass, replace
from typing import Any, cast

from budget.spend import SPEND
from helpers.errors import CourseConfigError
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
    Checking,
    Matches,
    Number,
    OneOf,
    Rule,
    Whole,
    backend_with_keys,
    check_rollouts_in_flight,
    completion_window,
    fewer_than_steps,
    max_tokens,
    problems,
    run_name,
    temperature,
    training_pool,
)

# Notebook 04's parameters set the training loop: the settings a notebook without its own
# (08's short run, the scripts, the bench) trains with.
LOOP_NOTEBOOK = "04_training_loop"


@dataclass(frozen=True)
class Parameter:
    """One parameter of one notebook: the parameters cell's `value`, the `rule` it must
    pass, `doc` (one line on what it does; `make docs` adds the rule's range), and what None
    stands for `local`ly and in the `cloud`. Its sizes in the named profiles are in `SIZES`."""

    value: object
    rule: Rule
    doc: str
    local: object = None
    cloud: object = None

    def default(self, backend: str) -> object:
        """What the notebook uses when the value is None on `backend`."""
        return {"local": self.local, "cloud": self.cloud}[backend]


# Shared declarations: a notebook takes one as it is, or changes a field with `replace`.
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
    None, Number(0.0, 1.0, above_low=True, none_ok=True), "Adam's step size", local=1e-3, cloud=5e-4
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
# Notebook 09 compares base and adapter on notebook 04's known facts (the local data's 393),
# or, in the cloud, which has none, on the held-out rows.
COMPARED_PROBLEMS = {"local": 393, "cloud": HELD_OUT_PROBLEMS["cloud"]}
RUN_NAME = Parameter(
    "arithmetic", run_name, "runs/<run_name>/ holds the run's metrics, figures and resume state"
)
# Large enough for the cloud defaults of every notebook (notebook 07's is the largest,
# 808 rollouts of at most 1,024 tokens), small enough that a mistyped parameter is caught.
DEFAULT_BUDGET_SAMPLED_TOKENS = 1_000_000
BUDGET = Parameter(
    DEFAULT_BUDGET_SAMPLED_TOKENS,
    Whole(0, 10**12),
    "cloud only: the most tokens the notebook may sample; it stops before its first request "
    "if its estimate is larger",
)
SIMULATED = "local only: simulated seconds "

NOTEBOOK_PARAMETERS: dict[str, dict[str, Parameter]] = {
    "01_scoring": {
        "backend": BACKEND,
        "example_index": replace(EXAMPLE_INDEX, doc="which training problem to render below"),
        # No rollouts to compare here: a group of one is fine.
        "group_size": Parameter(
            4,
            Whole(1, MAX_GROUP_SIZE),
            "how many environments the group builder makes for one problem",
        ),
    },
    "02_snapshot_and_serve": {
        "backend": BACKEND,
        "example_index": replace(EXAMPLE_INDEX, doc="which training problem to sample"),
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
        "seed": replace(SEED, doc="picks the problems and the new adapter's initial weights"),
        "groups": replace(GROUPS_PER_STEP, value=16, doc="problems in the step, a group each"),
        "group_size": GROUP_SIZE,
        "learning_rate": replace(LEARNING_RATE, local=1e-4),
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
        "seed": replace(SEED, doc="picks each step's problems and the held-out ones"),
        "eval_problems": replace(
            EVAL_PROBLEMS, doc="held-out problems notebook 05 scores before and after training"
        ),
        "eval_samples": EVAL_SAMPLES,
        "completion_window": COMPLETION_WINDOW,
        "budget_sampled_tokens": replace(BUDGET, doc=BUDGET.doc + ", and mid-run once it has"),
    },
    "05_did_it_learn": {
        "backend": BACKEND,
        "run_name": replace(RUN_NAME, doc="the notebook 04 run to evaluate (runs/<run_name>/)"),
        "pass_at_k_problems": Parameter(
            20,
            Whole(0, HELD_OUT_PROBLEMS["local"]),
            "problems of each of two held-out sets scored for pass@k, 16 answers each, "
            "before and after training (local only; 0 skips pass@k)",
        ),
        "budget_sampled_tokens": BUDGET,
    },
    "10_reward_hacking": {
        "backend": replace(
            BACKEND, doc='"local" only: in the cloud, two more runs would cost money'
        ),
        "run_name": replace(
            RUN_NAME, value="loophole", doc="runs/<run_name>/: the two runs' counts"
        ),
        "loophole_steps": Parameter(
            60,
            Whole(0, 10_000),
            "steps of each of the two runs, one per grader, with notebook 04's default "
            "settings (0 skips them; 60 take two to four minutes on a two-core laptop)",
        ),
    },
    "06_compare_runs": {
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
    "07_faster_loops": {
        "backend": BACKEND,
        "steps": Parameter(
            None,
            PIPELINE_STEPS,
            "optimizer steps per run (the first fills the pipeline)",
            local=12,
            cloud=5,
        ),
        "group_size": GROUP_SIZE,
        "groups_per_step": replace(GROUPS_PER_STEP, value=4),
        # 16 problems, each trained on about 3 times in 12 steps: enough repeats for the tiny
        # local model's reward on them to rise within one short run, which the whole
        # training set's 1,074 problems (and the held-out ones) do not show in 12 steps.
        "train_problems": Parameter(
            16,
            training_pool(TRAIN_PROBLEMS),
            "the fixed problems every run trains on, and is scored on afterwards",
        ),
        "max_staleness": Parameter(
            3, fewer_than_steps, "k of the third run: batches in flight, and their age in steps"
        ),
        # 2e-3 locally: at 1e-3 the reward on the 16 problems rose in 12 steps for most seeds
        # but not all; the cloud keeps Kimi's LoRA rate.
        "learning_rate": replace(LEARNING_RATE, local=2e-3),
        "temperature": TEMPERATURE,
        "max_tokens": MAX_TOKENS,
        "seed": replace(SEED, doc="picks the fixed problems and each step's share of them"),
        "flex_steps": Parameter(
            None, PIPELINE_STEPS, "steps of the extra run in the flex window", local=5, cloud=4
        ),
        "eval_samples": replace(
            EVAL_SAMPLES,
            doc="samples per problem when scoring each model on the fixed problems",
            local=8,
        ),
        "run_name": replace(RUN_NAME, value="faster-loops"),
        "balanced_latency_s": Parameter(
            1.0, SIMULATED_SECONDS, SIMULATED + "a balanced rollout takes"
        ),
        "flex_latency_s": Parameter(2.5, SIMULATED_SECONDS, SIMULATED + "a flex rollout takes"),
        "train_latency_s": Parameter(1.0, SIMULATED_SECONDS, SIMULATED + "a training step takes"),
        "budget_sampled_tokens": BUDGET,
    },
    "08_sandboxed_rollouts": {
        "backend": BACKEND,
        "steps": Parameter(None, STEPS, "optimizer steps", local=10, cloud=3),
        "group_size": Parameter(
            8, Whole(2, 16), "rollouts (and sandboxes) per task; GRPO compares them"
        ),
        "groups_per_step": Parameter(8, Whole(1, 64), "shell tasks per step, a group each"),
        "learning_rate": replace(LEARNING_RATE, local=2e-3),
        "temperature": TEMPERATURE,
        "max_tokens": replace(
            MAX_TOKENS,
            doc="tokens a reply may have (Kimi K2.6 thinks before it writes its script)",
            local=40,
        ),
        "seed": replace(SEED, doc="picks the training tasks and the new adapter's initial weights"),
        "eval_tasks": Parameter(
            None,
            Whole(1, 256, none_ok=True),
            "held-out tasks scored before and after training",
            local=32,
            cloud=8,
        ),
        "eval_samples": Parameter(
            None, Whole(1, 16, none_ok=True), "samples per held-out task", local=4, cloud=2
        ),
        "run_name": replace(
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
    "09_ship_the_adapter": {
        "backend": BACKEND,
        "run_name": replace(RUN_NAME, doc="the notebook 04 run to ship"),
        "short_run_steps": Parameter(
            None, STEPS, "trained here only if that run does not exist", local=12, cloud=7
        ),
        "parity_problems": Parameter(4, Whole(1, 64), "held-out problems for the parity check"),
        "eval_problems": replace(
            EVAL_PROBLEMS,
            rule=problems(COMPARED_PROBLEMS, "compared", none_ok=True),
            doc="problems on which base and adapter are compared (locally notebook 04's known "
            "facts, in the cloud its held-out rows)",
            local=COMPARED_PROBLEMS["local"],
        ),
        "eval_samples": replace(EVAL_SAMPLES, doc="sampled answers per problem, from each"),
        "max_tokens": MAX_TOKENS,
        "seed": replace(SEED, doc="picks the problems"),
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

# The named size profiles: each notebook's values in it, for the parameters it changes.
# One notebook's values a line (or two): a table, so the formatter leaves it as written.
# fmt: off
SIZES: dict[str, dict[str, dict[str, object]]] = {
    # Seconds a notebook, for `make test`'s executed notebooks. Notebook 03 keeps 7 groups of
    # 2: it needs a group whose rewards differ, which 2 groups missed in all 3 draws about once
    # in 20 and 7 miss about once in 10^5, and their 14 completions stay below the
    # inspect_step.MIN_PER_GROUP a side at which its sign check calls a sign measured.
    "small": {
        "01_scoring": dict(group_size=3),
        "02_snapshot_and_serve": dict(group_size=2),
        "03_one_grpo_step": dict(groups=7, group_size=2),
        "04_training_loop": dict(steps=3, group_size=2, groups_per_step=4, eval_problems=10,
                                 eval_samples=1),
        "05_did_it_learn": dict(pass_at_k_problems=10),
        "10_reward_hacking": dict(loophole_steps=3),
        "07_faster_loops": dict(steps=4, group_size=4, groups_per_step=2, train_problems=4,
                                max_staleness=2, flex_steps=3, eval_samples=1, flex_latency_s=1.5),
        "08_sandboxed_rollouts": dict(steps=2, group_size=2, groups_per_step=2, eval_tasks=4,
                                      eval_samples=1, simulated_boot_seconds=0.2),
        "09_ship_the_adapter": dict(short_run_steps=2, parity_problems=2, eval_problems=10,
                                    eval_samples=1),
    },
    # The cloud rehearsal (`scripts/rehearse_cloud.py`): the fewest tokens that still run
    # every cell of the cloud branch.
    "rehearsal": {
        "01_scoring": dict(group_size=2),
        "02_snapshot_and_serve": dict(group_size=2, max_tokens=24),
        "03_one_grpo_step": dict(groups=7, group_size=2, max_tokens=24),
        "04_training_loop": dict(steps=3, group_size=2, groups_per_step=2, max_tokens=24,
                                 eval_problems=4, eval_samples=1),
        "05_did_it_learn": dict(pass_at_k_problems=10),
        "10_reward_hacking": dict(loophole_steps=2),
        "07_faster_loops": dict(steps=3, group_size=2, groups_per_step=2, train_problems=2,
                                max_staleness=2, max_tokens=24, flex_steps=3, eval_samples=1),
        "08_sandboxed_rollouts": dict(steps=3, group_size=2, groups_per_step=2, max_tokens=24,
                                      eval_samples=1),
        "09_ship_the_adapter": dict(short_run_steps=1, parity_problems=2, eval_problems=2,
                                    eval_samples=1, max_tokens=24),
    },
    # Far fewer steps, rollouts and held-out problems than notebook 04's defaults: `sweep`
    # fits sweeps/default.toml's six runs in a few minutes on a busy two-core machine
    # (docs/runs.md), `tiny-sweep` the four of `make run`'s. `long-sweep` keeps the defaults'
    # rollouts and held-out problems and cuts the steps to 40: long enough for the learning
    # rates of sweeps/stored.toml to differ, whose six runs notebook 06 reads from
    # measurements/stored_sweep.json.
    "tiny-sweep": {"04_training_loop": dict(steps=4, groups_per_step=4, eval_problems=30)},
    "sweep": {"04_training_loop": dict(steps=12, groups_per_step=4, eval_problems=50)},
    "long-sweep": {"04_training_loop": dict(steps=40)},
}
# fmt: on


def backend_defaults(backend: str, notebook: str = LOOP_NOTEBOOK) -> dict[str, object]:
    """What None stands for on `backend`, for each of `notebook`'s parameters that may be None
    (`helpers.connect` hands notebook 04's to every notebook as `course.defaults`)."""
    return {
        name: parameter.default(backend)
        for name, parameter in NOTEBOOK_PARAMETERS[notebook].items()
        if parameter.value is None
    }


# Each notebook's settings: a frozen dataclass with a field per parameter, in the cell's order.
SETTINGS = {
    notebook: make_dataclass("Settings", [(name, Any) for name in declared], frozen=True)
    for notebook, declared in NOTEBOOK_PARAMETERS.items()
}
PROFILES = sorted(SIZES)


def profile(notebook: str, name: str) -> dict[str, object]:
    """The values `notebook`'s parameters take in size profile `name` (those it sets)."""
    if name not in SIZES:
        raise CourseConfigError(f"the profiles are {', '.join(PROFILES)}, not {name!r}.")
    return dict(SIZES[name].get(notebook, {}))


def resolve(
    notebook: str, backend: str = "local", size: str | None = None, **values: object
) -> Any:
    """`notebook`'s settings: its declared values, then profile `size`'s, then `values`,
    each checked by its rule (in the cell's order) and each None replaced by `backend`'s
    default. A value out of range raises CourseConfigError in one sentence."""
    declared = NOTEBOOK_PARAMETERS[notebook]
    if unknown := set(values) - set(declared):
        raise CourseConfigError(
            f"{sorted(unknown)[0]} is not a parameter of {notebook}, whose parameters are "
            f"{', '.join(declared)}."
        )
    given = {name: parameter.value for name, parameter in declared.items()}
    given |= profile(notebook, size) if size else {}
    given |= {"backend": backend} if "backend" in declared else {}
    given |= values
    OneOf(BACKENDS)("backend", given.get("backend", backend))  # the other rules read it
    backend = cast(str, given.get("backend", backend))
    defaults = {name: parameter.default(backend) for name, parameter in declared.items()}
    checking = Checking(backend, given, defaults)
    for name, parameter in declared.items():
        parameter.rule(name, given[name], checking)
    check_rollouts_in_flight(checking)
    return SETTINGS[notebook](**{name: checking.value(name) for name in declared})


def settings(notebook: str, namespace: Mapping[str, object]) -> Any:
    """The check cell's call: `notebook`'s parameters as the parameters cell (and papermill's
    injected cell) left them in `namespace`, checked and with the backend's defaults filled
    in; prints what the run may spend, and refuses it in the cloud if that passes its budget."""
    given = {name: namespace[name] for name in NOTEBOOK_PARAMETERS[notebook]}
    cfg = resolve(notebook, **cast(dict[str, Any], given))  # checked by their rules
    if spend := SPEND.get(notebook):
        spend(cfg, asdict(resolve(LOOP_NOTEBOOK, cfg.backend)), _started_with(cfg))
    return cfg


def _started_with(cfg: Any) -> dict[str, object]:
    """The settings the run `cfg.run_name` was started with on `cfg.backend` (empty if none)."""
    from helpers.runlog import RUNS_DIR

    if not hasattr(cfg, "run_name"):
        return {}
    path = RUNS_DIR / cfg.run_name / "state.json"
    stored = json.loads(path.read_text()).get("settings", {}) if path.exists() else {}
    return stored if stored.get("backend") == cfg.backend else {}
