"""Notebook 04's exercise: the loop body, one GRPO step, checked on the real stack.

The check runs the learner's `run_step` for tiny steps against the real training client
and Sail, and looks at what each step did rather than at its numbers (sampling is random):
which calls reached the training client, in which order, what was sent to
`forward_backward`, and what the step recorded. Two problems make a step's advantages
known in advance: their rollouts are sampled for real, but paid fixed rewards, one group
(1, 0, 0, 0) and one degenerate group (0.5 each); in the second step (local only) both
groups are degenerate, so it must skip training and still record what the loop reads.

So that one call's record can be told from another's, each call gets a step number of its
own and its own recording of the training client (`_FreshCall`).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
import types
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import tinker
import torch
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.types import EnvGroupBuilder, StepResult, TrajectoryGroup

from budget.cost import sampled_tokens
from exercises.check import Case, Exercise, Mistake
from helpers.scoring import MathEnv, MathGroupBuilder
from helpers.training import (
    LoopSettings,
    delete_checkpoint,
    mean_reward,
    metric_rates,
    rollout_groups,
    run_step,
    snapshot_policy,
    split_degenerate_groups,
    train_step_metrics,
)

PAID_G = ((1.0, 0.0, 0.0, 0.0), (0.5, 0.5, 0.5, 0.5))  # one group that teaches, one degenerate
# What the loop cell, its plots and the run's files read from a step's record; a learner's
# record may hold more.
RECORD_KEYS = (
    "step",
    "correct",
    "format",
    "reward",
    "degenerate_pct",
    "skipped",
    "datums",
    "dropped_rollouts",
    "sampled_tokens",
    "save_s",
    "sample_s",
    "train_s",
)
TRAINED_KEYS = ("optim/importance_weight_min", "optim/importance_weight_max")
_CHECK_STEPS = itertools.count(90_000)  # step numbers no run of the course reaches
_CALLS: dict[int, RecordingTrainingClient] = {}


class RecordingTrainingClient:
    """The real training client, writing down each call that changes or saves the weights."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.calls: list[str] = []
        self.sent: list[tuple[list[tinker.Datum], str]] = []  # forward_backward's data, loss

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def _note(self, name: str) -> Any:
        self.calls.append(name.removesuffix("_async"))
        return getattr(self._client, name)

    def save_weights_for_sampler_async(self, *args: Any, **kwargs: Any) -> Any:
        return self._note("save_weights_for_sampler_async")(*args, **kwargs)

    def save_weights_for_sampler(self, *args: Any, **kwargs: Any) -> Any:
        return self._note("save_weights_for_sampler")(*args, **kwargs)

    def forward_backward_async(self, data: Any, loss_fn: str, *args: Any, **kwargs: Any) -> Any:
        self.sent.append((list(data), loss_fn))
        return self._note("forward_backward_async")(data, loss_fn, *args, **kwargs)

    def forward_backward(self, data: Any, loss_fn: str, *args: Any, **kwargs: Any) -> Any:
        self.sent.append((list(data), loss_fn))
        return self._note("forward_backward")(data, loss_fn, *args, **kwargs)

    def optim_step_async(self, *args: Any, **kwargs: Any) -> Any:
        return self._note("optim_step_async")(*args, **kwargs)

    def optim_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._note("optim_step")(*args, **kwargs)


class _FreshCall(Mapping):
    """The keyword arguments of the check's step: each time a call unpacks them, a new step
    number and a new recording of the training client (`_CALLS` finds it by the number)."""

    def __init__(self, **shared: Any) -> None:
        self._shared = shared
        self._current: dict[str, Any] = {}

    def keys(self) -> Any:  # `f(**mapping)` calls this once per call
        step = next(_CHECK_STEPS)
        recording = RecordingTrainingClient(self._shared["training_client"])
        _CALLS[step] = recording
        self._current = {**self._shared, "step": step, "training_client": recording}
        return self._current.keys()

    def __getitem__(self, key: str) -> Any:
        return self._current[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self._shared) + 1


class UnpaidMathEnv(MathEnv):
    """`MathEnv`, grading as usual (its metrics) but paying nothing itself."""

    async def step(self, action: list[int], *, extra: Any = None) -> StepResult:
        return dataclasses.replace(await super().step(action, extra=extra), reward=0.0)


@dataclass(frozen=True)
class PaidGroup(MathGroupBuilder):
    """A real problem, sampled for real, whose rollouts are paid `paid_G` whatever they say."""

    grader: type[MathEnv] = UnpaidMathEnv
    paid_G: tuple[float, ...] = ()

    async def compute_group_rewards(self, trajectory_group, env_group):
        return [(paid, {}) for paid, _ in zip(self.paid_G, trajectory_group, strict=False)]


def with_pieces(step: Any, namespace: dict[str, Any]) -> Any:
    """`step` (the `run_step` the check chose) calling the pieces it names as `namespace`
    defines them: the notebook's globals, so that a piece edited in the notebook is the one
    the loop runs, the course's `run_step` included (a learner's already does)."""
    rebound = types.FunctionType(
        step.__code__,
        namespace,
        step.__name__,
        step.__defaults__,
        step.__closure__,
    )
    rebound.__dict__.update(step.__dict__)  # the check's mark: the course's reference or not
    return rebound


async def loop_check_context(course: Any, settings: Any) -> dict[str, Any]:
    """What the check of `run_step` needs: a LoRA training client of its own (the run's
    weights are not touched), short rollouts, and the two paid problems."""
    training_client = await course.service_client.create_lora_training_client_async(
        base_model=course.model_name, rank=course.adapter_config["r"], seed=0
    )
    builders = [
        PaidGroup(row, course.renderer, len(paid_G), paid_G=paid_G)
        for row, paid_G in zip(course.train_rows, PAID_G, strict=False)
    ]
    check_settings = LoopSettings(
        run_name="loop-body-check",
        group_size=len(PAID_G[0]),
        learning_rate=settings.learning_rate,
        max_tokens=16,
        temperature=1.0,
        completion_window=settings.completion_window,
    )
    return {
        "builders": builders,
        "settings": check_settings,
        "training_client": training_client,
        "course": course,
    }


async def _test_context() -> dict[str, Any]:
    import helpers

    course = helpers.connect("local")
    return await loop_check_context(course, LoopSettings("check", 4, 1e-3, 16, 1.0, "balanced"))


def _loop_cases(**context: Any) -> list[Case]:
    cases = [
        Case("one step: a group paid 1, 0, 0, 0 and a degenerate one", (), _FreshCall(**context))
    ]
    # Locally, a step with nothing to learn from too: it must skip training and still record
    # every key the loop cell reads. Not in the cloud, where each step's sampler checkpoint
    # is an adapter archive Tinker builds and Sail downloads (budget/cost.py).
    if context["course"].backend == "local":
        all_degenerate = [
            dataclasses.replace(builder, paid_G=(0.5,) * len(builder.paid_G))
            for builder in context["builders"]
        ]
        cases.append(
            Case(
                "one step whose groups are all degenerate (every rollout paid 0.5)",
                (),
                _FreshCall(**{**context, "builders": all_degenerate}),
            )
        )
    return cases


def _completion_advantage(datum: tinker.Datum) -> float:
    """The advantage a datum gives its completion tokens (its prompt tokens get 0)."""
    advantages = datum.loss_fn_inputs["advantages"].to_torch()
    nonzero = advantages[advantages != 0]
    return round(float(nonzero[0]), 3) if len(nonzero) else 0.0


def observed(result: Any) -> dict[str, Any]:
    """What a step did, as far as the check can tell whatever the samples were."""
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], dict)):
        return {"returned": "not (record, groups)"}
    record, _ = result
    recording = _CALLS.get(record.get("step"))
    if recording is None:
        return {"record": "its step is not the step it was given"}
    data = [datum for sent, _ in recording.sent for datum in sent]
    trained = bool(recording.sent)
    return {
        "calls": recording.calls,
        "losses": [loss for _, loss in recording.sent],
        "advantages": sorted(_completion_advantage(datum) for datum in data),
        "record": {
            "datums": record.get("datums"),
            "degenerate_pct": record.get("degenerate_pct"),
            "skipped": record.get("skipped"),
            "reward": round(float(record.get("reward", float("nan"))), 3),
        },
        "missing": sorted(set(RECORD_KEYS + (TRAINED_KEYS if trained else ())) - set(record)),
    }


def _same_step(got: Any, expected: Any) -> bool:
    return observed(got) == observed(expected)


def _shown(result: Any) -> str:
    """A step as the check sees it, in one line (the samples, which differ from call to call,
    left out): the calls that reached Tinker, the record's counts, the advantages sent."""
    seen = observed(result)
    if "calls" not in seen:
        return str(seen)
    losses = iter(seen["losses"])
    calls = "→".join(
        f"{call}({next(losses, '?')})" if call.startswith("forward_backward") else call
        for call in seen["calls"]
    )
    parts = [calls or "no call to Tinker"]
    parts.append(
        ", ".join(
            f"{key} {value:g}" if isinstance(value, float) else f"{key} {value}"
            for key, value in seen["record"].items()
        )
    )
    if seen["missing"]:
        parts.append("record lacks " + ", ".join(seen["missing"]))
    counts = Counter(seen["advantages"])
    parts.append(
        "advantages "
        + (", ".join(f"{a:g}" + (f"×{n}" if n > 1 else "") for a, n in counts.items()) or "none")
    )
    return "; ".join(parts)


async def _step_with(
    mistake: str,
    step: int,
    builders: Sequence[EnvGroupBuilder],
    settings: LoopSettings,
    training_client: Any,
    course: Any,
) -> tuple[dict, list[TrajectoryGroup]]:
    """The course's step, with one typical `mistake` made on purpose."""
    started = time.monotonic()
    name = f"{settings.run_name}-step-{step}"
    policy = await snapshot_policy(name, settings, training_client, course)
    saved = time.monotonic()
    groups, dropped_rollouts = await rollout_groups(builders, policy)
    await delete_checkpoint(course.service_client, policy.checkpoint_path)
    sampled = time.monotonic()
    training_groups, degenerate_groups = split_degenerate_groups(groups)
    if mistake == "degenerate kept":
        training_groups = groups
    elif mistake == "lists swapped":
        training_groups, degenerate_groups = degenerate_groups, training_groups
    elif mistake == "nothing trained":
        training_groups = []
    data: list[tinker.Datum] = []
    metrics: dict[str, float] = {}
    if training_groups:
        advantages = compute_advantages(training_groups)
        if mistake == "rewards as advantages":
            advantages = [torch.tensor(g.get_total_rewards()) for g in training_groups]
        elif mistake.startswith("divided by the std"):
            unbiased = mistake.endswith("(unbiased)")
            advantages = [a / a.std(unbiased=unbiased).clamp_min(1e-6) for a in advantages]
        data, _ = assemble_training_data(training_groups, advantages)
        sent = [
            tinker.Datum(
                model_input=d.model_input,
                loss_fn_inputs={k: v for k, v in d.loss_fn_inputs.items() if k != "mask"},
            )
            for d in data
        ]
        adam = tinker.AdamParams(
            learning_rate=settings.learning_rate, beta1=0.9, beta2=0.95, eps=1e-8
        )
        if mistake == "optim_step first":
            optimized = await training_client.optim_step_async(adam)
            backward = await training_client.forward_backward_async(sent, "importance_sampling")
        else:
            backward = await training_client.forward_backward_async(sent, "importance_sampling")
            if mistake != "no optim_step":
                optimized = await training_client.optim_step_async(adam)
        outputs = (await backward.result_async()).loss_fn_outputs
        learner_logprobs = [output["logprobs"].to_torch() for output in outputs]
        if mistake != "no optim_step":
            metrics = dict((await optimized.result_async()).metrics or {})
        metrics.update(train_step_metrics(data, learner_logprobs))
    trained = time.monotonic()
    record = {
        "step": step,
        **metric_rates(groups),
        "reward": mean_reward(groups),
        "degenerate_pct": (1.0 if mistake == "a fraction" else 100.0)
        * (len(degenerate_groups) / len(groups) if groups else 1.0),
        "skipped": not training_groups,
        "datums": len(data),
        "dropped_rollouts": dropped_rollouts,
        "sampled_tokens": sampled_tokens(groups),
        "save_s": saved - started,
        "sample_s": sampled - saved,
        "train_s": trained - sampled,
        **metrics,
    }
    return record, groups


def _mistake(kind: str) -> Any:
    return functools.partial(_step_with, kind)


LOOP_BODY = Exercise(
    name="run_step",
    notebook="04_training_loop",
    minutes=25,
    reference=run_step,
    cases=_loop_cases,
    same=_same_step,
    shown=_shown,
    test_context=_test_context,
    needs_stack=True,
    mistakes=[
        Mistake(
            "optim_step missing",
            "your step sent forward_backward but never optim_step: Tinker computed the "
            "gradient and kept it, and the weights did not move. Call "
            "training_client.optim_step_async(tinker.AdamParams(...)) after forward_backward.",
            _mistake("no optim_step"),
        ),
        Mistake(
            "optim_step before forward_backward",
            "optim_step came before forward_backward: it applied whatever gradient was left "
            "from before (none, or the last step's), and this step's gradient waits for the "
            "next step. Send forward_backward first, then optim_step.",
            _mistake("optim_step first"),
        ),
        Mistake(
            "degenerate groups trained on",
            "you trained on the degenerate group too (every rollout paid 0.5): its advantages "
            "are all 0, so its datums cost tokens and teach nothing, and `datums` counts "
            "them. Train on the first list split_degenerate_groups returns.",
            _mistake("degenerate kept"),
        ),
        Mistake(
            "the split's two lists swapped",
            "you trained on the degenerate groups and left out the one that teaches: "
            "split_degenerate_groups returns (kept, degenerate), in that order.",
            _mistake("lists swapped"),
        ),
        Mistake(
            "no group trained on",
            "nothing reached forward_backward although one group's rewards differ (1, 0, 0, 0): "
            "skip training only when split_degenerate_groups kept no group.",
            _mistake("nothing trained"),
        ),
        Mistake(
            "rewards used as advantages",
            "your datums carry the rewards (1, 0, 0, 0) as advantages; pass "
            "compute_advantages(groups), each reward minus its group's mean (0.75, -0.25, "
            "-0.25, -0.25), to assemble_training_data.",
            _mistake("rewards as advantages"),
        ),
        *(
            Mistake(
                f"advantages divided by the group's standard deviation ({spread})",
                "you divided each group's advantages by its standard deviation "
                f"({spread}), as published GRPO does. The course, like the cookbook's "
                "compute_advantages, only centres them (Dr. GRPO's choice; see *Degenerate "
                "groups*): pass compute_advantages(kept) to assemble_training_data unchanged.",
                _mistake(f"divided by the std ({spread})"),
            )
            for spread in ("unbiased", "population")
        ),
        Mistake(
            "degenerate_pct as a fraction",
            "your degenerate_pct is a fraction (0.5); the record keeps a percentage (50), as "
            "its name says and the loop's step line prints: multiply by 100.",
            _mistake("a fraction"),
        ),
    ],
)
