"""What each spending notebook samples, trains and creates, counted from its settings.

`helpers.settings` calls `SPEND[notebook](cfg, loop, run)` from the check cell, before any
request: `cfg` is the notebook's settings, `loop` notebook 04's declared settings on that
backend, and `run` the settings the run `cfg.run_name` was started with there (empty if none).
Each count follows the notebook's cells: a change to what a cell samples belongs here too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from budget.cost import describe_sandboxes, estimate_and_cap

# Notebook 04's settings, by name: as declared (`loop`), or as a stored run recorded them.
Loop = Mapping[str, Any]


def _cap(cfg: Any, sampled: dict[str, int], **costs: int) -> None:
    """`estimate_and_cap` for a run of `cfg`: `sampled` rollouts per part, then the others."""
    estimate_and_cap(
        cfg.backend, cfg.budget_sampled_tokens, max_tokens=cfg.max_tokens, sampled=sampled, **costs
    )


def _print_model_settings(cfg: Any) -> None:
    print(f"backend: {cfg.backend}   learning rate: {cfg.learning_rate}   ", end="")
    print(f"max_tokens: {cfg.max_tokens}")


def _spend_02(cfg: Any, loop: Loop, run: Loop) -> None:
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


def _spend_03(cfg: Any, loop: Loop, run: Loop) -> None:
    rollouts = cfg.groups * cfg.group_size
    _cap(  # up to three draws of problems, then one step on one draw's rollouts
        cfg,
        {f"in up to three draws of {cfg.groups} groups": 3 * rollouts},
        trained_rollouts=rollouts,
        adapter_archives=1,  # one checkpoint serves every draw
        # Learner logprobs before and after the step, and (optional cell) ppo's and cispo's losses.
        forward_rollouts=4 * rollouts,
    )


def _spend_04(cfg: Any, loop: Loop, run: Loop) -> None:
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


def _spend_05(cfg: Any, loop: Loop, run: Loop) -> None:
    """Held-out evaluations at the sizes the run started with (else notebook 04's)."""
    sizes = {**loop, **run}
    rollouts = 2 * sizes["eval_samples"] * sizes["eval_problems"] * HELD_OUT_SETS[cfg.backend]
    estimate_and_cap(
        cfg.backend,
        cfg.budget_sampled_tokens,
        max_tokens=sizes["max_tokens"],
        sampled={"in the held-out evaluations before and after": rollouts},
        adapter_archives=2,  # a sampler checkpoint per evaluation
        flex_rollouts=rollouts * (sizes["completion_window"] == "flex"),
    )
    if cfg.backend == "local":  # pass@k runs on the local backend only, where sampling is free
        print("  not counted: pass@k's rollouts")


def _spend_07(cfg: Any, loop: Loop, run: Loop) -> None:
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
# written here because budget/ sits below shell_tasks/ (tests/course/test_cost.py holds them
# equal).
TAMPER_STRATEGIES = 9
# The cases of 07's step exercise (`exercises.sandboxed_rollouts`), a policy sandbox each;
# held equal to the exercise's cases by the same test.
STEP_CHECK_CASES = 7


def _spend_08(cfg: Any, loop: Loop, run: Loop) -> None:
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


def _spend_09(cfg: Any, loop: Loop, run: Loop) -> None:
    # The short run is counted even when run_name has a checkpoint: it trains whenever that
    # checkpoint cannot be loaded, at notebook 04's declared sizes.
    short_run = cfg.short_run_steps * loop["groups_per_step"] * loop["group_size"]
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


SPEND: dict[str, Callable[[Any, Loop, Loop], None]] = {
    "02_snapshot_and_serve": _spend_02,
    "03_one_grpo_step": _spend_03,
    "04_training_loop": _spend_04,
    "05_did_it_learn": _spend_05,
    "07_faster_loops": _spend_07,
    "08_sandboxed_rollouts": _spend_08,
    "09_ship_the_adapter": _spend_09,
}
