# Generated from notebooks/03_one_grpo_step.ipynb by `make helpers`. Do not edit: change
# the `# @save` cells there, then run `make helpers` again.
"""One GRPO step, opened up: the numbers `train_step` computes but never shows, and
when the sign of a mean change among them counts as measured.
"""

import random
from typing import Any, NamedTuple

import tinker
import torch
from tinker_cookbook.rl.types import TrajectoryGroup

from helpers.scoring import MathGroupBuilder
from helpers.training import rollout_groups, split_degenerate_groups


async def sample_with_spread(
    policy: Any, course: Any, rng: random.Random, groups: int, group_size: int, draws: int = 3
) -> list[TrajectoryGroup]:
    """Roll out `groups` random training problems, `group_size` samples each; if every group
    is degenerate (all rewards equal: nothing to learn), draw again, `draws` times at most."""
    for _ in range(draws):
        rows = rng.sample(course.train_rows, groups)
        builders = [MathGroupBuilder(row, course.renderer, group_size) for row in rows]
        sampled, _ = await rollout_groups(builders, policy)
        if split_degenerate_groups(sampled)[0]:
            return sampled
    raise RuntimeError(f"{draws} draws of {groups} problems gave no group with a reward spread")


def without_mask(datum: tinker.Datum) -> tinker.Datum:
    """The datum as `train_step` sends it: `mask` serves the cookbook's own metrics, and
    Tinker's RL losses take only target_tokens, logprobs and advantages."""
    inputs = {k: v for k, v in datum.loss_fn_inputs.items() if k != "mask"}
    return tinker.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


async def learner_logprobs(training_client: Any, data_D: list[tinker.Datum]) -> list[torch.Tensor]:
    """Each datum's per-target logprobs under the weights Tinker holds now (`forward`
    computes no gradient, so it leaves the next optimizer step untouched)."""
    sent_D = [without_mask(d) for d in data_D]
    future = await training_client.forward_async(sent_D, loss_fn="importance_sampling")
    result = await future.result_async()
    return [output["logprobs"].to_torch() for output in result.loss_fn_outputs]


def importance_sampling_terms(datum: tinker.Datum, logprobs_T: torch.Tensor) -> torch.Tensor:
    """One datum's per-token terms of Tinker's `importance_sampling` loss (the loss is their sum).

    `logprobs_T` are the learner's logprobs of the datum's target tokens (from `forward`), one
    per position; the sampler's and the advantages are in `datum.loss_fn_inputs` (each a
    `tinker.TensorData`: `.to_torch()` gives the tensor). Each term is -weight * advantage,
    with weight = exp(learner logprob - sampler logprob). Returns a tensor
    shaped like `logprobs_T` (the prompt's terms are 0: their advantage is 0).
    """
    sampler_T = datum.loss_fn_inputs["logprobs"].to_torch()
    advantages_T = datum.loss_fn_inputs["advantages"].to_torch()
    return -torch.exp(logprobs_T - sampler_T) * advantages_T


def completion_logprob_changes(
    data_D: list[tinker.Datum], before_D: list[torch.Tensor], after_D: list[torch.Tensor]
) -> list[float]:
    """How far a step moved each completion's total logprob: the change summed over the
    completion's own tokens (mask 1), leaving out the prompt positions."""
    return [
        float(((after_T - before_T) * datum.loss_fn_inputs["mask"].to_torch()).sum())
        for datum, before_T, after_T in zip(data_D, before_D, after_D, strict=True)
    ]


# A mean's sign counts as measured at this many standard errors from zero.
STANDARD_ERRORS = 3.0
# A standard error from a handful of values is too noisy to trust (with two values it is often
# tiny by chance), so a sign check needs at least this many values per group.
MIN_PER_GROUP = 8


class SignCheck(NamedTuple):
    """Two groups' mean changes and their standard errors: can their signs be told?"""

    mean_positive: float
    mean_negative: float
    error_positive: float
    error_negative: float
    fewest: int  # values in the smaller group

    @property
    def decisive(self) -> bool:
        """Enough values, and each mean at least STANDARD_ERRORS standard errors from zero."""
        return (
            self.fewest >= MIN_PER_GROUP
            and abs(self.mean_positive) >= STANDARD_ERRORS * self.error_positive
            and abs(self.mean_negative) >= STANDARD_ERRORS * self.error_negative
        )

    def sentence(self) -> str:
        changes = f"the mean changes ({self.mean_positive:+.2e} and {self.mean_negative:+.2e} nats)"
        why = (
            f"come from as few as {self.fewest} completions, fewer than the {MIN_PER_GROUP} a "
            "standard error needs"
            if self.fewest < MIN_PER_GROUP
            else f"are within {STANDARD_ERRORS:g} standard errors ({self.error_positive:.1e}, "
            f"{self.error_negative:.1e}) of zero"
        )
        return f"{changes} {why}, so their signs are not measured: shown, not asserted"


def sign_check(positive: list[float], negative: list[float]) -> SignCheck:
    """Mean and standard error of the mean of each group (at least two values each)."""

    def mean_and_error(values: list[float]) -> tuple[float, float]:
        n = len(values)
        mean = sum(values) / n
        variance = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else float("inf")
        return mean, (variance / n) ** 0.5

    (mp, ep), (mn, en) = mean_and_error(positive), mean_and_error(negative)
    return SignCheck(mp, mn, ep, en, min(len(positive), len(negative)))
