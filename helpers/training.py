# Generated from notebooks/04_training_loop.ipynb and
# notebooks/05_did_it_learn.ipynb by `make helpers`. Do not edit: change
# the `# @save` cells there, then run `make helpers` again.
"""One GRPO step: snapshot, roll out on Sail, score, advantages, one Tinker optimizer step.

Also the counter that stops a run whose rollouts all failed, the held-out evaluation that
notebook 05 runs on the base and the trained weights, its summary figure, and its pass@k
curves and their figure.
"""

import asyncio
import time  # noqa: F401 (run_step's solution uses it)
from collections.abc import Callable, Sequence  # noqa: F401 (05's pass@k curve uses Callable)
from dataclasses import dataclass
from typing import Any

import numpy as np  # noqa: F401 (notebook 05's evaluation uses it)
import tinker  # run_step's solution sends tinker.Datum; CountingPolicy's types
import torch
from tinker_cookbook.completers import StopCondition, TokenCompleter, TokensWithLogprobs
from tinker_cookbook.exceptions import AllTrajectoriesFailedError
from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
from tinker_cookbook.rl.metrics import compute_kl_sample_train
from tinker_cookbook.rl.rollout_strategy import MinViableGroup
from tinker_cookbook.rl.rollouts import do_group_rollout
from tinker_cookbook.rl.train import train_step
from tinker_cookbook.rl.types import EnvGroupBuilder, TrajectoryGroup

from budget.cost import sampled_tokens  # noqa: F401 (run_step's solution uses it)
from helpers.errors import CourseRunError  # CountingPolicy's, like the completers' types
from helpers.runlog import run_id
from helpers.scoring import MathGroupBuilder, final_answer  # noqa: F401 (05 uses final_answer)
from helpers.serving import ROLLOUT_TIMEOUT_S, SnapshotCompleter, sail_policy


@dataclass(frozen=True)
class LoopSettings:
    """A run's knobs: notebook 04 passes its `cfg`, which has these fields; a script builds one."""

    run_name: str
    group_size: int
    learning_rate: float
    max_tokens: int
    temperature: float
    completion_window: str


def mean_reward(groups: list[TrajectoryGroup]) -> float:
    rewards = [float(r) for group in groups for r in group.get_total_rewards()]
    return sum(rewards) / len(rewards) if rewards else 0.0


def rollout_metrics(groups: list[TrajectoryGroup]) -> list[dict]:
    """Each rollout's environment metrics (`MathEnv`: "correct" and "format", 0 or 1)."""
    return [t.transitions[-1].metrics for g in groups for t in g.trajectories_G]


def metric_rate(groups: list[TrajectoryGroup], key: str) -> float:
    """The mean of `key` over the rollouts that report it: for "correct", the fraction right."""
    values = [m[key] for m in rollout_metrics(groups) if key in m]
    return sum(values) / len(values) if values else 0.0


def metric_rates(groups: list[TrajectoryGroup]) -> dict[str, float]:
    """`metric_rate` of each metric the environment reports (`MathEnv`: "correct", "format")."""
    keys = dict.fromkeys(key for metrics in rollout_metrics(groups) for key in metrics)
    return {key: metric_rate(groups, key) for key in keys}


def split_degenerate_groups(
    groups: list[TrajectoryGroup],
) -> tuple[list[TrajectoryGroup], list[TrajectoryGroup]]:
    """Separate groups whose rewards differ (they teach) from groups where all are equal."""
    kept: list[TrajectoryGroup] = []
    degenerate: list[TrajectoryGroup] = []
    for group in groups:
        rewards = [float(r) for r in group.get_total_rewards()]
        (degenerate if len(set(rewards)) == 1 else kept).append(group)
    return kept, degenerate


async def rollout_groups(
    builders: Sequence[Any], policy: Any, min_successful: int = 2
) -> tuple[list[TrajectoryGroup], int]:
    """Roll out every group concurrently (`builders`: the cookbook's `EnvGroupBuilder`s, each
    with a `group_size`, such as `MathGroupBuilder`). A failed rollout (a Sail error, a timeout)
    is dropped, not retried; a group survives while `min_successful` of its rollouts do (for
    training, two: the least GRPO can compare). Returns the surviving groups and how many
    rollouts were dropped; raises if all failed: a run going on would learn and score nothing."""
    timeout = ROLLOUT_TIMEOUT_S[policy.completion_window]  # flex may take hours
    counted = CountingPolicy(policy)
    strategy = MinViableGroup(min_successful, max_retries=0, per_rollout_timeout=timeout)
    results = await asyncio.gather(
        *(do_group_rollout(b, counted, strategy=strategy) for b in builders),
        return_exceptions=True,
    )
    counted.raise_if_all_failed()
    groups, dropped = [], 0
    for builder, result in zip(builders, results, strict=True):
        if isinstance(result, AllTrajectoriesFailedError):
            dropped += builder.group_size
        elif isinstance(result, BaseException):
            raise result
        else:
            groups.append(result)
            dropped += len(result.rollout_errors)
    return groups, dropped


STATE_TTL_SECONDS = 7 * 24 * 3600  # a training state lives a week, then Tinker deletes it


async def delete_checkpoint(service_client: Any, tinker_path: str) -> None:
    """Delete a checkpoint we are done with (its TTL would delete it later anyway)."""
    await service_client.create_rest_client().delete_checkpoint_from_tinker_path_async(tinker_path)


async def snapshot_policy(
    name: str, settings: LoopSettings, training_client: Any, course: Any, run: str = ""
) -> SnapshotCompleter:
    """The current weights as sampler checkpoint `name`, served by Sail with the run's settings
    under `name` and the run's id (`run`, by default `run_id(settings.run_name)`): checkpoint
    names repeat from run to run, the name Sail is given must not."""
    return await sail_policy(
        training_client,
        course.service_client,
        course.adapter_config,
        name,
        lora_name=f"{name}-{run or run_id(settings.run_name)}",
        model_name=course.model_name,
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        completion_window=settings.completion_window,
    )


def train_step_metrics(data: list[Any], learner_logprobs: list[torch.Tensor]) -> dict[str, float]:
    """Importance weights, loss and sampler-learner KL of one step's datums, given Tinker's
    logprob of each datum's target tokens before the update (`learner_logprobs`). Prompt
    positions (mask 0) are not completion tokens and carry no advantage."""
    completion_weights, loss = [], 0.0
    for datum, learner in zip(data, learner_logprobs, strict=True):
        inputs = datum.loss_fn_inputs
        weight = torch.exp(learner - inputs["logprobs"].to_torch())
        completion_weights.append(weight[inputs["mask"].to_torch() > 0])
        loss -= float((weight * inputs["advantages"].to_torch()).sum())
    weights = torch.cat(completion_weights)
    return {
        "optim/loss_sum": loss,
        "optim/importance_weight_mean": float(weights.mean()),
        "optim/importance_weight_min": float(weights.min()),
        "optim/importance_weight_max": float(weights.max()),
        **compute_kl_sample_train(data, learner_logprobs),
    }


async def run_step(
    step: int,
    builders: Sequence[EnvGroupBuilder],
    settings: LoopSettings,
    training_client: Any,
    course: Any,
) -> tuple[dict, list[TrajectoryGroup]]:
    """One step of the loop on any task's groups: returns the step's record (which the loop
    logs and plots) and its rollout groups.

    1. `snapshot_policy(f"{settings.run_name}-step-{step}", settings, training_client, course)`
       saves the current weights and gives a Sail policy for them.
    2. `rollout_groups(builders, policy)` gives `(groups, dropped_rollouts)`; Sail is then done
       with the checkpoint: `delete_checkpoint(course.service_client, policy.checkpoint_path)`.
    3. `split_degenerate_groups(groups)` gives `(kept, degenerate)`. Train on `kept`; if it is
       empty, skip 4 and 5: no datums, no optimizer step.
    4. `compute_advantages(kept)` (each reward minus its group's mean), then
       `assemble_training_data(kept, advantages)` gives `(data, _)`: a `tinker.Datum` a rollout.
    5. `training_client.forward_backward_async(sent, "importance_sampling")`, `sent` being the
       datums without their "mask" input (`tinker.Datum(model_input=..., loss_fn_inputs=...)`),
       then `training_client.optim_step_async(adam)`, `adam` being `tinker.AdamParams(
       learning_rate=settings.learning_rate, beta1=0.9, beta2=0.95, eps=1e-8)`. Each returns a
       future: `await future.result_async()`. Datum i's learner logprobs are the backward
       result's `loss_fn_outputs[i]["logprobs"].to_torch()`.
    6. The record, a skipped step's too: "step"; `**metric_rates(groups)`; "reward"
       (`mean_reward(groups)`); "degenerate_pct" (% of `groups`, 100 if none survived);
       "skipped" (no group kept); "datums" (how many sent); "dropped_rollouts"; "sail_retries"
       (`sum(policy.retries.values())`); "sampled_tokens" (`sampled_tokens(groups)`); "save_s",
       "sample_s", "train_s" (`time.monotonic()` differences); if it trained, "advantage_abs_mean",
       the optimizer result's `metrics`, `**train_step_metrics(data, learner_logprobs)`.
    """
    started = time.monotonic()
    policy = await snapshot_policy(
        f"{settings.run_name}-step-{step}", settings, training_client, course
    )
    saved = time.monotonic()

    groups, dropped_rollouts = await rollout_groups(builders, policy)
    await delete_checkpoint(course.service_client, policy.checkpoint_path)  # Sail is done with it
    sampled = time.monotonic()

    training_groups, degenerate_groups = split_degenerate_groups(groups)
    data: list[tinker.Datum] = []
    training_metrics: dict[str, float] = {}
    if training_groups:  # a step with nothing to learn from is skipped, not fatal
        advantages = compute_advantages(training_groups)
        data, _ = assemble_training_data(training_groups, advantages)
        sent = [  # Tinker's importance_sampling loss takes no "mask" input
            tinker.Datum(
                model_input=datum.model_input,
                loss_fn_inputs={k: v for k, v in datum.loss_fn_inputs.items() if k != "mask"},
            )
            for datum in data
        ]
        backward = await training_client.forward_backward_async(sent, "importance_sampling")
        adam = tinker.AdamParams(
            learning_rate=settings.learning_rate, beta1=0.9, beta2=0.95, eps=1e-8
        )
        optimized = await training_client.optim_step_async(adam)
        outputs = (await backward.result_async()).loss_fn_outputs
        learner_logprobs = [output["logprobs"].to_torch() for output in outputs]
        training_metrics = {
            "advantage_abs_mean": float(torch.cat(advantages).abs().mean()),
            **((await optimized.result_async()).metrics or {}),
            **train_step_metrics(data, learner_logprobs),
        }
    trained = time.monotonic()

    record = {
        "step": step,
        **metric_rates(groups),  # MathEnv's "correct" and "format"
        "reward": mean_reward(groups),
        "degenerate_pct": 100.0 * len(degenerate_groups) / len(groups) if groups else 100.0,
        "skipped": not training_groups,
        "datums": len(data),
        "dropped_rollouts": dropped_rollouts,
        "sail_retries": sum(policy.retries.values()),  # 429s, 5xxs and timeouts retried
        "sampled_tokens": sampled_tokens(groups),  # what the cloud bills for sampling
        "save_s": saved - started,
        "sample_s": sampled - saved,
        "train_s": trained - sampled,
        **training_metrics,
    }
    return record, groups


MAX_QUOTED_CHARS = 300  # of the first failure's message, on one line


class AllRolloutsFailedError(CourseRunError):
    """Not one rollout of a batch got an answer from the policy."""


class CountingPolicy(TokenCompleter):
    """Calls `policy` unchanged, counting answers and failures (a timeout is a failure)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.answered = 0
        self.failed = 0
        self.first_failure: BaseException | None = None

    async def __call__(
        self, model_input: tinker.ModelInput, stop: StopCondition, *, max_tokens: int | None = None
    ) -> TokensWithLogprobs:
        # As the cookbook's rollouts do: `max_tokens` only when a budget applies, so a policy
        # whose __call__ takes no such keyword still works.
        extra = {} if max_tokens is None else {"max_tokens": max_tokens}
        try:
            answer = await self.policy(model_input, stop, **extra)
        except BaseException as failure:  # re-raised: counted, never swallowed
            self.failed += 1
            self.first_failure = self.first_failure or failure
            raise
        self.answered += 1
        return answer

    def raise_if_all_failed(self) -> None:
        if self.answered or not self.failed:
            return
        failure = self.first_failure
        if isinstance(failure, asyncio.CancelledError):
            first = "it timed out"
        else:
            said = " ".join(str(failure).split())[:MAX_QUOTED_CHARS].rstrip(".")
            first = f"the first was {type(failure).__name__}: {said}"
        raise AllRolloutsFailedError(
            f"All {self.failed} rollouts failed, so there is nothing to train on or score; {first}."
        )


async def train_on_groups(
    training_groups: list[TrajectoryGroup], learning_rate: float, training_client: Any
) -> tuple[list[Any], list[torch.Tensor], dict[str, float]]:
    """One optimizer step on groups that are not degenerate: advantages, datums, `train_step`.

    Returns the datums, the learner's logprobs of their tokens before the update, and the
    step's metrics: Tinker's own, and those of `train_step_metrics`.
    """
    advantages = compute_advantages(training_groups)
    data, _ = assemble_training_data(training_groups, advantages)
    optim_metrics: dict[str, float] = {}  # train_step adds what Tinker's optim_step reports
    learner_logprobs = await train_step(
        data_D=data,
        training_client=training_client,
        learning_rate=learning_rate,
        num_substeps=1,
        loss_fn="importance_sampling",
        metrics=optim_metrics,
    )
    metrics = {
        "advantage_abs_mean": float(torch.cat(advantages).abs().mean()),
        **optim_metrics,
        **train_step_metrics(data, learner_logprobs),
    }
    return data, learner_logprobs, metrics


SCORES = ("reward", "correct", "format", "correct_given_format")
COUNTS = ("samples", "reward", "correct", "format", "correct_and_format")


def problem_counts(groups: list[TrajectoryGroup], rows: list[dict]) -> list[dict]:
    """Per problem, in `rows` order: its samples, and their summed reward, correct, format
    and correct-and-format. A problem whose samples all failed keeps zero counts."""
    counts = {row["question"]: dict.fromkeys(COUNTS, 0.0) for row in rows}
    for group in groups:
        for trajectory, reward in zip(group.trajectories_G, group.get_total_rewards(), strict=True):
            last = trajectory.transitions[-1]
            problem = counts[last.logs["question"]]  # MathEnv logs which problem it scored
            problem["samples"] += 1
            problem["reward"] += reward
            problem["correct"] += last.metrics["correct"]
            problem["format"] += last.metrics["format"]
            problem["correct_and_format"] += last.metrics["correct"] * last.metrics["format"]
    return list(counts.values())


def scores(counts: dict) -> dict:
    """Pooled scores from summed counts (numbers, or arrays of resampled sums)."""
    samples = np.maximum(counts["samples"], 1)
    return {
        "reward": counts["reward"] / samples,
        "correct": counts["correct"] / samples,
        "format": counts["format"] / samples,
        "correct_given_format": counts["correct_and_format"] / np.maximum(counts["format"], 1),
    }


EXAMPLES_KEPT = 3  # first answers kept per evaluation, to read side by side


def first_answers(groups: list[TrajectoryGroup], rows: list[dict], renderer: Any) -> list[dict]:
    """The first sampled answer to each of the first EXAMPLES_KEPT problems, to read."""
    answers = {row["question"]: final_answer(row["answer"]) for row in rows[:EXAMPLES_KEPT]}
    examples = []
    for group in groups:  # in `rows` order; a problem whose samples all failed has none
        first = group.trajectories_G[0]
        if (question := first.transitions[-1].logs["question"]) in answers:
            text = renderer.tokenizer.decode(first.transitions[0].ac.tokens)
            completion = text if len(text) <= 300 else "…" + text[-300:]
            example = {"question": question, "answer": answers[question], "completion": completion}
            examples.append(example | {"reward": group.get_total_rewards()[0]})
    return examples


async def evaluate(policy: Any, rows: list[dict], renderer: Any, samples_per_problem: int) -> dict:
    """Score `policy` on `rows` without training: the scores pooled over every sample (see
    `scores`), `samples`, `dropped_rollouts`, the counts per problem that the intervals
    resample (`problems`) and a few answers to read (`examples`)."""
    builders = [MathGroupBuilder(row, renderer, samples_per_problem) for row in rows]
    groups, dropped = await rollout_groups(builders, policy, min_successful=1)
    problems = problem_counts(groups, rows)
    totals = {key: sum(problem[key] for problem in problems) for key in COUNTS}
    return {
        **{score: float(value) for score, value in scores(totals).items()},
        "samples": int(totals["samples"]),
        "dropped_rollouts": dropped,
        "problems": problems,
        "examples": first_answers(groups, rows, renderer),
    }


async def evaluate_now(
    name: str, sets: dict, settings: LoopSettings, samples: int, client: Any, course: Any
) -> dict[str, dict]:
    """Serve `client`'s weights as sampler checkpoint `name`; score each set of rows in `sets`."""
    policy = await snapshot_policy(name, settings, client, course)
    evaluations = (evaluate(policy, rows, course.renderer, samples) for rows in sets.values())
    results = await asyncio.gather(*evaluations)
    await delete_checkpoint(course.service_client, policy.checkpoint_path)
    return dict(zip(sets, results, strict=True))


def bootstrap_interval(
    before: list[dict], after: list[dict] | None = None, resamples: int = 2000, seed: int = 0
) -> dict[str, tuple[float, float]]:
    """The 95% interval of each score of `before` (counts per problem), or, given `after`
    (the same problems in the same order), of each gain after - before: whole problems are
    resampled, the same ones before and after. The fixed `seed` repeats every interval."""
    pick = np.random.default_rng(seed).integers(0, len(before), size=(resamples, len(before)))

    def resampled(problems: list[dict]) -> dict:
        return scores(
            {key: np.array([p[key] for p in problems])[pick].sum(axis=1) for key in COUNTS}
        )

    values = resampled(before)
    if after is not None:
        values = {score: value - values[score] for score, value in resampled(after).items()}
    return {
        score: (float(np.percentile(value, 2.5)), float(np.percentile(value, 97.5)))
        for score, value in values.items()
    }


def compare(before: dict, after: dict) -> dict[str, dict]:
    """Each score before and after training, and its gain, each with its 95% interval."""
    intervals = {
        "before": bootstrap_interval(before["problems"]),
        "after": bootstrap_interval(after["problems"]),
        "gain": bootstrap_interval(before["problems"], after["problems"]),
    }
    return {
        score: {
            "before": before[score],
            "after": after[score],
            "gain": after[score] - before[score],
            **{f"{when}_interval": interval[score] for when, interval in intervals.items()},
        }
        for score in SCORES
    }


def pass_at_k(samples: int, correct: int, k: int) -> float:
    """The chance that at least one of k answers, drawn without replacement from `samples`
    answers of which `correct` are right, is right: 1 - C(samples - correct, k) / C(samples, k)
    (Chen et al. 2021). `math.comb(n, r)` is C(n, r), and 0 when r > n."""
    from math import comb

    return 1.0 - comb(samples - correct, k) / comb(samples, k)


SCORE_LABELS = {  # the label under each score's pair of bars
    "reward": "mean reward",
    "correct": "correct",
    "format": "format",
    "correct_given_format": "correct, of\nwell-formed",
}
# Behind each bar's label, so that it stays readable where an interval's line crosses it.
LABEL_BOX = {"facecolor": "white", "alpha": 0.8, "pad": 1, "edgecolor": "none"}


def draw_importance_weights(ax: Any, records: list[dict]) -> None:
    """How far each step's importance weights strayed from 1, on a log scale."""
    from helpers.plots import SMOOTHING_STEPS, draw_series  # drawn like the training curves

    weight = "optim/importance_weight_"  # each step's record holds its _max and _min
    deviations = [
        {"step": r["step"], "deviation": max(r[weight + "max"] - 1, 1 - r[weight + "min"])}
        for r in records
        if r.get(weight + "max") is not None
    ]
    draw_series(ax, deviations, "deviation", "largest |weight - 1|", "tab:purple")
    if ax.lines and max(d["deviation"] for d in deviations) > 0:
        ax.set_yscale("log")
    ax.set(title="Importance weights, per step", xlabel="step")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(loc="upper right", fontsize=8, title=f"{SMOOTHING_STEPS}-step average")


def draw_held_out(ax: Any, name: str, comparison: dict, samples: int) -> None:
    """Each score of one held-out set (what `compare` returned) before and after training,
    as bars with their 95% intervals; the title gives the correct-of-well-formed gain."""
    xs = np.arange(len(SCORES))
    width = 0.38
    lowest = 0.0  # the y-axis reaches down to the lowest interval, before or after
    for offset, when in ((-width / 2, "before"), (width / 2, "after")):
        values = np.array([comparison[score][when] for score in SCORES])
        low, high = np.array([comparison[score][f"{when}_interval"] for score in SCORES]).T
        errors = [values - low, high - values]
        bars = ax.bar(xs + offset, values, width, yerr=errors, capsize=3, label=f"{when} training")
        ax.bar_label(bars, fmt="%.2f", fontsize=8, label_type="center", bbox=LABEL_BOX)
        lowest = min(lowest, *low)
    ax.set_xticks(xs, [SCORE_LABELS[score] for score in SCORES])
    ax.set_ylim(lowest - 0.05, 1.1)
    ax.axhline(0, color="black", linewidth=0.6)
    gain = comparison["correct_given_format"]
    low, high = gain["gain_interval"]
    ax.set_title(
        f"Held-out, {name} ({samples} samples)\n"
        f"correct of well-formed: {gain['gain']:+.3f} [{low:+.3f}, {high:+.3f}]",
        fontsize=10,
    )
    ax.legend(loc="upper left", fontsize=8)


def summary_figure(
    records: list[dict], comparisons: dict[str, dict], samples: dict[str, int], path: Any
) -> Any:
    """Training curves and importance weights (top), held-out scores with 95% intervals
    (bottom, one panel per held-out set, `samples` answers each); saved as PNG at `path`
    and returned. `records` are the run's metrics, `comparisons[set]` what `compare` returned."""
    # Imported here: notebook 04's first cell holds the module's imports, and only figures draw.
    import matplotlib.pyplot as plt

    from helpers.plots import draw_training_panels

    fig = plt.figure(figsize=(14, 8))
    grid = fig.add_gridspec(2, 6)
    top = [fig.add_subplot(grid[0, 2 * i : 2 * i + 2]) for i in range(3)]
    draw_training_panels(top[:2], records)
    draw_importance_weights(top[2], records)
    width = 6 // max(len(comparisons), 2)  # up to three held-out sets side by side
    for i, (name, comparison) in enumerate(comparisons.items()):
        ax = fig.add_subplot(grid[1, width * i : width * (i + 1)])
        draw_held_out(ax, name, comparison, samples[name])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def pass_at_k_curve(
    problems: list[dict],
    k_max: int,
    baseline: list[dict] | None = None,
    resamples: int = 2000,
    estimate: Callable[[int, int, int], float] = pass_at_k,
) -> dict[str, np.ndarray]:
    """pass@k for k = 1..k_max, averaged over problems, with its 95% interval.

    `problems` are `evaluate`'s counts per problem ("samples" and "correct"), each with at
    least k_max samples. Whole problems are resampled with a fixed seed. Given `baseline` (the
    same problems in the same order, scored by other weights), the curve and interval are of
    the gain, problems - baseline, each resample taking the same problems from both.
    `estimate(samples, correct, k)` is one problem's pass@k (notebook 05 passes the learner's).
    """

    def per_problem(counts: list[dict]) -> np.ndarray:  # problems x k
        if any(p["samples"] < k_max for p in counts):
            raise ValueError(f"pass@{k_max} needs at least {k_max} samples of every problem")
        ks = range(1, k_max + 1)
        return np.array(
            [[estimate(int(p["samples"]), int(p["correct"]), k) for k in ks] for p in counts]
        )

    values_PK = per_problem(problems)
    if baseline is not None:
        values_PK = values_PK - per_problem(baseline)
    pick = np.random.default_rng(0).integers(0, len(values_PK), size=(resamples, len(values_PK)))
    resampled_RK = values_PK[pick].mean(axis=1)
    return {
        "k": np.arange(1, k_max + 1),
        "value": values_PK.mean(axis=0),
        "low": np.percentile(resampled_RK, 2.5, axis=0),
        "high": np.percentile(resampled_RK, 97.5, axis=0),
    }


def pass_at_k_figure(curves: dict[str, dict[str, dict]]) -> Any:
    """pass@k against k, one panel per held-out set, base and trained weights each with its
    95% interval as a band. `curves[set][when]` is what `pass_at_k_curve` returned. Returns
    the matplotlib figure."""
    # Imported here: notebook 04's first cell holds the module's imports, and only figures draw.
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.8), squeeze=False)
    for ax, (name, by_when) in zip(axes[0], curves.items(), strict=True):
        for when, curve in by_when.items():
            (line,) = ax.plot(curve["k"], curve["value"], marker="o", markersize=3, label=when)
            ax.fill_between(
                curve["k"], curve["low"], curve["high"], alpha=0.2, color=line.get_color()
            )
        ax.set_xscale("log", base=2)
        ticks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= curve["k"][-1]]
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("k (answers sampled per problem)")
        ax.set_ylabel("pass@k")
        ax.set_title(f"Held-out, {name}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig
