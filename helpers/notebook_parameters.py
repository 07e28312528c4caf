"""Every notebook parameter, declared once: its value, rule, doc, backend defaults and profiles.

The cell after a notebook's parameters cell is `cfg = helpers.settings(notebook, globals())`:
every value checked (one sentence for a bad one), each None replaced by the backend's default,
what the run may spend printed, and a frozen `Settings` returned. Scripts, sweeps and tests
call `resolve(notebook, backend, profile)` and name a size profile (`small`, `rehearsal`,
`tiny-sweep`, `sweep`, `long-sweep`) instead of copying numbers. `make docs` writes the
parameters cells and the docs' parameter tables from `NOTEBOOK_PARAMETERS`; a notebook's
learner-facing parameters come first, cloud-only and budget knobs last. The rules are
`helpers.params`, a leaf.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, make_dataclass, replace
from typing import Any

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
    pass, what None stands for on each backend, `doc`, one line on what it does (its range is
    added from the rule), and its value in each named size profile that sets it."""

    value: object
    rule: Rule
    doc: str
    local: object = None
    cloud: object = None
    profiles: Mapping[str, object] = field(default_factory=dict)

    def default(self, backend: str) -> object:
        """What the notebook uses when the value is None on `backend`."""
        return {"local": self.local, "cloud": self.cloud}[backend]


def _with(parameter: Parameter, **changes: object) -> Parameter:
    """`parameter` with `changes`: its fields by name; any other name is a size profile, with
    the parameter's value in it (`tiny_sweep` names `tiny-sweep`)."""
    fields = {name: v for name, v in changes.items() if name in Parameter.__dataclass_fields__}
    sizes = {name.replace("_", "-"): v for name, v in changes.items() if name not in fields}
    return replace(parameter, **fields, profiles={**parameter.profiles, **sizes})


# Shared declarations: a notebook takes one as it is, or changes it with `_with`.
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

NOTEBOOK_PARAMETERS: dict[str, dict[str, Parameter]] = {
    "01_scoring": {
        "backend": BACKEND,
        "example_index": _with(EXAMPLE_INDEX, doc="which training problem to render below"),
        "group_size": _with(
            Parameter(
                4,
                Whole(1, MAX_GROUP_SIZE),  # no rollouts to compare here: a group of one is fine
                "how many environments the group builder makes for one problem",
            ),
            small=3,
            rehearsal=2,
        ),
    },
    "02_snapshot_and_serve": {
        "backend": BACKEND,
        "example_index": _with(EXAMPLE_INDEX, doc="which training problem to sample"),
        "group_size": _with(
            Parameter(4, Whole(1, MAX_GROUP_SIZE), "samples of the same problem"),
            small=2,
            rehearsal=2,
        ),
        "temperature": TEMPERATURE,
        "max_tokens": _with(MAX_TOKENS, rehearsal=24),
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
        # 7 groups of 2: notebook 03 needs a group whose rewards differ, which 2 groups of 2
        # missed in all 3 draws about once in 20; 7 miss about once in 10^5, and their 14
        # completions stay below the inspect_step.MIN_PER_GROUP a side at which its sign check
        # calls a sign measured.
        "groups": _with(
            GROUPS_PER_STEP,
            value=16,
            doc="problems in the step, a group each",
            small=7,
            rehearsal=7,
        ),
        "group_size": _with(GROUP_SIZE, small=2, rehearsal=2),
        "learning_rate": _with(LEARNING_RATE, local=1e-4),
        "temperature": TEMPERATURE,
        "max_tokens": _with(MAX_TOKENS, rehearsal=24),
        "budget_sampled_tokens": BUDGET,
    },
    "04_training_loop": {
        "backend": BACKEND,
        "run_name": RUN_NAME,  # every exercise sets a new one
        # Far fewer steps, rollouts and held-out problems than the defaults in each profile:
        # `sweep` fits sweeps/default.toml's six runs in a few minutes on a busy two-core
        # machine (docs/runs.md), `tiny-sweep` the four of `make run`'s. `long-sweep` keeps
        # the defaults' rollouts and held-out problems and cuts the steps to 40: long enough
        # for the learning rates of sweeps/stored.toml to differ, whose six runs notebook 06
        # reads from measurements/stored_sweep.json.
        "steps": _with(
            Parameter(None, STEPS, "optimizer steps", local=90, cloud=7),
            small=3,
            rehearsal=3,
            tiny_sweep=4,
            sweep=12,
            long_sweep=40,
        ),
        "group_size": _with(GROUP_SIZE, small=2, rehearsal=2),
        "groups_per_step": _with(GROUPS_PER_STEP, small=4, rehearsal=2, tiny_sweep=4, sweep=4),
        "learning_rate": LEARNING_RATE,
        "temperature": TEMPERATURE,
        "max_tokens": _with(MAX_TOKENS, rehearsal=24),
        "seed": _with(SEED, doc="picks each step's problems and the held-out ones"),
        "eval_problems": _with(
            EVAL_PROBLEMS,
            doc="held-out problems notebook 05 scores before and after training",
            small=10,
            rehearsal=4,
            tiny_sweep=30,
            sweep=50,
        ),
        "eval_samples": _with(EVAL_SAMPLES, small=1, rehearsal=1),
        "completion_window": COMPLETION_WINDOW,
        "budget_sampled_tokens": _with(BUDGET, doc=BUDGET.doc + ", and mid-run once it has"),
    },
    "05_did_it_learn": {
        "backend": BACKEND,
        "run_name": _with(RUN_NAME, doc="the notebook 04 run to evaluate (runs/<run_name>/)"),
        "pass_at_k_problems": _with(
            Parameter(
                20,
                Whole(0, HELD_OUT_PROBLEMS["local"]),
                "problems of each of two held-out sets scored for pass@k, 16 answers each, "
                "before and after training (local only; 0 skips pass@k)",
            ),
            small=10,
            rehearsal=10,
        ),
        "budget_sampled_tokens": BUDGET,
    },
    "10_reward_hacking": {
        "backend": _with(BACKEND, doc='"local" only: in the cloud, two more runs would cost money'),
        "run_name": _with(RUN_NAME, value="loophole", doc="runs/<run_name>/: the two runs' counts"),
        "loophole_steps": _with(
            Parameter(
                60,
                Whole(0, 10_000),
                "steps of each of the two runs, one per grader, with notebook 04's default "
                "settings (0 skips them; 60 take two to four minutes on a two-core laptop)",
            ),
            small=3,
            rehearsal=2,
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
        "steps": _with(
            Parameter(
                None,
                PIPELINE_STEPS,
                "optimizer steps per run (the first fills the pipeline)",
                12,
                5,
            ),
            small=4,
            rehearsal=3,
        ),
        "group_size": _with(GROUP_SIZE, small=4, rehearsal=2),
        "groups_per_step": _with(GROUPS_PER_STEP, value=4, small=2, rehearsal=2),
        # 16 problems, each trained on about 3 times in 12 steps: enough repeats for the tiny
        # local model's reward on them to rise within one short run, which the whole
        # training set's 1,074 problems (and the held-out ones) do not show in 12 steps.
        "train_problems": _with(
            Parameter(
                16,
                training_pool(TRAIN_PROBLEMS),
                "the fixed problems every run trains on, and is scored on afterwards",
            ),
            small=4,
            rehearsal=2,
        ),
        "max_staleness": _with(
            Parameter(
                3, fewer_than_steps, "k of the third run: batches in flight, and their age in steps"
            ),
            small=2,
            rehearsal=2,
        ),
        # 2e-3 locally: at 1e-3 the reward on the 16 problems rose in 12 steps for most seeds
        # but not all; the cloud keeps Kimi's LoRA rate.
        "learning_rate": _with(LEARNING_RATE, local=2e-3),
        "temperature": TEMPERATURE,
        "max_tokens": _with(MAX_TOKENS, rehearsal=24),
        "seed": _with(SEED, doc="picks the fixed problems and each step's share of them"),
        "flex_steps": _with(
            Parameter(None, PIPELINE_STEPS, "steps of the extra run in the flex window", 5, 4),
            small=3,
            rehearsal=3,
        ),
        "eval_samples": _with(
            EVAL_SAMPLES,
            doc="samples per problem when scoring each model on the fixed problems",
            local=8,
            cloud=2,
            small=1,
            rehearsal=1,
        ),
        "run_name": _with(RUN_NAME, value="faster-loops"),
        "balanced_latency_s": Parameter(
            1.0, SIMULATED_SECONDS, "local only: simulated seconds a balanced rollout takes"
        ),
        "flex_latency_s": _with(
            Parameter(2.5, SIMULATED_SECONDS, "local only: simulated seconds a flex rollout takes"),
            small=1.5,
        ),
        "train_latency_s": Parameter(
            1.0, SIMULATED_SECONDS, "local only: simulated seconds a training step takes"
        ),
        "budget_sampled_tokens": BUDGET,
    },
    "08_sandboxed_rollouts": {
        "backend": BACKEND,
        "steps": _with(
            Parameter(None, STEPS, "optimizer steps", local=10, cloud=3), small=2, rehearsal=3
        ),
        "group_size": _with(
            Parameter(8, Whole(2, 16), "rollouts (and sandboxes) per task; GRPO compares them"),
            small=2,
            rehearsal=2,
        ),
        "groups_per_step": _with(
            Parameter(8, Whole(1, 64), "shell tasks per step, a group each"), small=2, rehearsal=2
        ),
        "learning_rate": _with(LEARNING_RATE, local=2e-3),
        "temperature": TEMPERATURE,
        "max_tokens": _with(
            Parameter(
                None,
                max_tokens,
                "tokens a reply may have (Kimi K2.6 thinks before it writes its script)",
                local=40,
                cloud=1024,
            ),
            rehearsal=24,
        ),
        "seed": _with(SEED, doc="picks the training tasks and the new adapter's initial weights"),
        "eval_tasks": _with(
            Parameter(
                None,
                Whole(1, 256, none_ok=True),
                "held-out tasks scored before and after training",
                local=32,
                cloud=8,
            ),
            small=4,
        ),
        "eval_samples": _with(
            Parameter(
                None, Whole(1, 16, none_ok=True), "samples per held-out task", local=4, cloud=2
            ),
            small=1,
            rehearsal=1,
        ),
        "run_name": _with(
            RUN_NAME,
            value="sandboxed-shell",
            doc="runs/<run_name>/ holds the run's metrics and task folders; a rerun starts it "
            "again",
        ),
        "simulated_boot_seconds": _with(
            Parameter(
                0.5, SIMULATED_SECONDS, "local only: stands in for a Sailbox's start-up time"
            ),
            small=0.2,
        ),
        "budget_sampled_tokens": BUDGET,
    },
    "09_ship_the_adapter": {
        "backend": BACKEND,
        "run_name": _with(RUN_NAME, doc="the notebook 04 run to ship"),
        "short_run_steps": _with(
            Parameter(None, STEPS, "trained here only if that run does not exist", 12, 7),
            small=2,
            rehearsal=1,
        ),
        "parity_problems": _with(
            Parameter(4, Whole(1, 64), "held-out problems for the parity check"),
            small=2,
            rehearsal=2,
        ),
        "eval_problems": _with(
            EVAL_PROBLEMS,
            rule=problems(COMPARED_PROBLEMS, "compared", none_ok=True),
            doc="problems on which base and adapter are compared (locally notebook 04's known "
            "facts, in the cloud its held-out rows)",
            local=COMPARED_PROBLEMS["local"],
            small=10,
            rehearsal=2,
        ),
        "eval_samples": _with(
            EVAL_SAMPLES, doc="sampled answers per problem, from each", small=1, rehearsal=1
        ),
        "max_tokens": _with(MAX_TOKENS, rehearsal=24),
        "seed": _with(SEED, doc="picks the problems"),
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
PROFILES = sorted(
    {name for ps in NOTEBOOK_PARAMETERS.values() for p in ps.values() for name in p.profiles}
)


def profile(notebook: str, name: str) -> dict[str, object]:
    """The values `notebook`'s parameters take in size profile `name` (those it sets)."""
    if name not in PROFILES:
        raise CourseConfigError(f"the profiles are {', '.join(PROFILES)}, not {name!r}.")
    return {
        parameter: declared.profiles[name]
        for parameter, declared in NOTEBOOK_PARAMETERS[notebook].items()
        if name in declared.profiles
    }


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
    backend = given.get("backend", backend)
    declared["backend"].rule("backend", backend, None)  # the other rules read it
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
    cfg = resolve(notebook, **{name: namespace[name] for name in NOTEBOOK_PARAMETERS[notebook]})
    if spend := SPEND.get(notebook):
        spend(cfg)
    return cfg


# What each spending notebook's cells sample and train, from its settings, before any paid
# request (`budget.cost.estimate_and_cap`).


def _cap(cfg: Any, sampled: dict[str, int], **costs: int) -> None:
    """`estimate_and_cap` for a run of `cfg`: `sampled` rollouts per part, then the others."""
    from budget.cost import estimate_and_cap

    estimate_and_cap(
        cfg.backend, cfg.budget_sampled_tokens, max_tokens=cfg.max_tokens, sampled=sampled, **costs
    )


def _print_model_settings(cfg: Any) -> None:
    print(f"backend: {cfg.backend}   learning rate: {cfg.learning_rate}   ", end="")
    print(f"max_tokens: {cfg.max_tokens}")


def _spend_02(cfg: Any) -> None:
    _cap(
        cfg,
        {
            "with a mismatched adapter config (the local stack refuses it unsampled)": 1,
            "in the group": cfg.group_size,
            "timing the two completion windows": 2 * cfg.group_size,
        },
        adapter_archives=2,  # the checkpoint signed by hand, and sail_policy's
        flex_rollouts=cfg.group_size,  # the group again, through flex
    )


def _spend_03(cfg: Any) -> None:
    rollouts = cfg.groups * cfg.group_size
    _cap(  # up to three draws of problems, then one step on one draw's rollouts
        cfg,
        {f"in up to three draws of {cfg.groups} groups": 3 * rollouts},
        trained_rollouts=rollouts,
        adapter_archives=1,  # one checkpoint serves every draw
        # Learner logprobs before and after the step, and (optional cell) ppo's and cispo's losses.
        forward_rollouts=4 * rollouts,
    )


def _spend_04(cfg: Any) -> None:
    rollouts_per_step = cfg.group_size * cfg.groups_per_step
    _print_model_settings(cfg)
    _cap(
        cfg,
        {f"in {cfg.steps} training steps": cfg.steps * rollouts_per_step},
        trained_rollouts=cfg.steps * rollouts_per_step,
        adapter_archives=cfg.steps,  # a sampler checkpoint per step
        flex_rollouts=cfg.steps * rollouts_per_step * (cfg.completion_window == "flex"),
    )
    print("  not counted: notebook 05's held-out evaluations (it counts them)")


# Held-out sets a notebook-04 evaluation scores: locally known facts RL never trains on,
# unseen facts and seen facts in new wording; in the cloud orca-math has only unseen ones.
HELD_OUT_SETS = {"local": 3, "cloud": 1}


def _spend_05(cfg: Any) -> None:
    """Held-out evaluations at the sizes the run started with (else notebook 04's)."""
    from budget.cost import estimate_and_cap
    from helpers.runlog import RUNS_DIR

    path = RUNS_DIR / cfg.run_name / "state.json"
    stored = json.loads(path.read_text()).get("settings", {}) if path.exists() else {}
    run = asdict(resolve(LOOP_NOTEBOOK, cfg.backend))
    run |= stored if stored.get("backend") == cfg.backend else {}
    rollouts = 2 * run["eval_samples"] * run["eval_problems"] * HELD_OUT_SETS[cfg.backend]
    estimate_and_cap(
        cfg.backend,
        cfg.budget_sampled_tokens,
        max_tokens=run["max_tokens"],
        sampled={"in the held-out evaluations before and after": rollouts},
        adapter_archives=2,  # a sampler checkpoint per evaluation
        flex_rollouts=rollouts * (run["completion_window"] == "flex"),
    )
    if cfg.backend == "local":  # pass@k runs on the local backend only, where sampling is free
        print("  not counted: pass@k's rollouts")


def _spend_07(cfg: Any) -> None:
    rollouts_per_step = cfg.group_size * cfg.groups_per_step
    training = {
        f"in the three runs of {cfg.steps} steps": 3 * cfg.steps * rollouts_per_step,
        f"in the flex run of {cfg.flex_steps} steps": cfg.flex_steps * rollouts_per_step,
    }
    scoring = 4 * cfg.train_problems * cfg.eval_samples
    _cap(
        cfg,
        {**training, "scoring four models on the fixed problems": scoring},
        trained_rollouts=sum(training.values()),
        # A checkpoint per step and per model scored.
        adapter_archives=3 * cfg.steps + cfg.flex_steps + 4,
        flex_rollouts=cfg.flex_steps * rollouts_per_step,
    )


# The tamper strategies notebook 08's optional cell grades: `len(shell_tasks.tamper.STRATEGIES)`,
# written here because shell_tasks imports helpers (tests/course/test_cost.py holds them equal).
TAMPER_STRATEGIES = 9
# The cases of 07's step exercise (`exercises.sandboxed_rollouts`), a policy sandbox each;
# held equal to the exercise's cases by the same test.
STEP_CHECK_CASES = 7


def _spend_08(cfg: Any) -> None:
    from budget.cost import describe_sandboxes

    rollouts_per_step = cfg.group_size * cfg.groups_per_step
    eval_rollouts = 2 * cfg.eval_tasks * cfg.eval_samples  # before and after training
    _print_model_settings(cfg)
    _cap(
        cfg,
        {
            # Locally a scripted policy writes the first group's replies: nothing is sampled.
            "in the first sandboxed group": cfg.group_size if cfg.backend == "cloud" else 0,
            f"in {cfg.steps} training steps": cfg.steps * rollouts_per_step,
            "in the held-out evaluations before and after": eval_rollouts,
        },
        trained_rollouts=cfg.steps * rollouts_per_step,
        adapter_archives=cfg.steps + 2,  # a sampler checkpoint per step, and one per evaluation
    )
    # Sandboxes by lifetime budget (s). 120: one by hand, twelve for containment, one to grade
    # each graded rollout (the grader's 60 s and a minute for its files). 600 (the group
    # builder's): group_size each for the prompt shown, the first group, sequential and
    # concurrent creation, then one per training and held-out rollout, and a policy sandbox per
    # step-check case. 80: at most two per case to grade a learner's step in (the case's 20 s
    # and the grader's minute), and the first group's grading. 90: graded containment rows and
    # tamper strategies; 300: the optional tamper cell's two per strategy.
    graded_rollouts = cfg.steps * rollouts_per_step + eval_rollouts
    at_600 = 4 * cfg.group_size + cfg.steps * rollouts_per_step + eval_rollouts
    lifetimes = {
        80: cfg.group_size + 2 * STEP_CHECK_CASES,
        90: 2 + TAMPER_STRATEGIES,
        120: 1 + 12 + graded_rollouts,
        300: 2 * TAMPER_STRATEGIES,
        600: at_600 + STEP_CHECK_CASES,
    }
    print(describe_sandboxes(lifetimes, cfg.backend))


def _spend_09(cfg: Any) -> None:
    # The short run is counted even when run_name has a checkpoint: it trains whenever that
    # checkpoint cannot be loaded, at notebook 04's declared sizes.
    loop = resolve(LOOP_NOTEBOOK, cfg.backend)
    short_run = cfg.short_run_steps * loop.groups_per_step * loop.group_size
    _cap(
        cfg,
        {
            f"in a {cfg.short_run_steps}-step run if {cfg.run_name!r} cannot be shipped": short_run,
            "for the parity checks (by URL, then by name)": 2 * cfg.parity_problems,
            "for the comparison (base, then adapter)": 2 * cfg.eval_problems * cfg.eval_samples,
        },
        trained_rollouts=short_run,
        # A checkpoint per step of that run, and the shipped one; the adapter and the base
        # model's logprobs on the samples drawn by URL and by name; one PEFT export served.
        adapter_archives=cfg.short_run_steps + 1,
        forward_rollouts=4 * cfg.parity_problems,
        exports=1,  # the PEFT files uploaded and served by name
    )


SPEND: dict[str, Callable[[Any], None]] = {
    "02_snapshot_and_serve": _spend_02,
    "03_one_grpo_step": _spend_03,
    "04_training_loop": _spend_04,
    "05_did_it_learn": _spend_05,
    "07_faster_loops": _spend_07,
    "08_sandboxed_rollouts": _spend_08,
    "09_ship_the_adapter": _spend_09,
}
