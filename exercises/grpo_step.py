"""Notebook 03's exercises: one GRPO step's numbers, computed by the learner."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tinker
import torch

from exercises.check import Case, Exercise, Mistake, same


def _group_advantages(rewards_G: torch.Tensor) -> torch.Tensor:
    return rewards_G - rewards_G.mean()


def _advantage_cases() -> list[Case]:
    def rewards(*values: float) -> tuple[torch.Tensor]:
        return (torch.tensor(values),)

    return [
        Case("one winner among four: rewards 1, 0, 0, 0", rewards(1.0, 0.0, 0.0, 0.0)),
        Case("two winners and a format penalty", rewards(1.0, -0.1, 0.0, 1.0)),
        Case("a tied group: all four right", rewards(1.0, 1.0, 1.0, 1.0)),
        Case("a group of two", rewards(0.0, 1.0)),
    ]


ADVANTAGES = Exercise(
    name="group_advantages",
    notebook="03_one_grpo_step",
    minutes=5,
    reference=_group_advantages,
    cases=_advantage_cases,
    mistakes=[
        Mistake(
            "divided by the group's standard deviation",
            "you divided by the group's standard deviation. That is GRPO as DeepSeekMath "
            "wrote it; the cookbook's default (and this course) only subtracts the mean, "
            "which Dr. GRPO argues is the unbiased choice.",
            lambda rewards_G: (rewards_G - rewards_G.mean()) / (rewards_G.std() + 1e-6),
        ),
        Mistake(
            "the sign flipped",
            "the sign is flipped: a completion that beat its group must get a positive "
            "advantage (reward minus mean, not mean minus reward).",
            lambda rewards_G: rewards_G.mean() - rewards_G,
        ),
        Mistake(
            "the rewards returned unchanged",
            "you returned the rewards themselves. Subtract the group's mean reward, so that a "
            "group whose samples all tie teaches nothing.",
            lambda rewards_G: rewards_G.clone(),
        ),
        Mistake(
            "a leave-one-out baseline",
            "you left each completion out of its own baseline (RLOO). That is a fine "
            "estimator too, but the cookbook's baseline is the mean of the whole group, "
            "the completion included.",
            lambda rewards_G: rewards_G - (rewards_G.sum() - rewards_G) / (len(rewards_G) - 1),
        ),
    ],
)


# -- the Datum ---------------------------------------------------------------------------


Rollout = tuple[list[int], list[int], list[float], float]  # prompt, completion, logprobs, advantage


def _datum(
    prompt: list[int], completion: list[int], sampler_logprobs: list[float], advantage: float
) -> tinker.Datum:
    tokens = prompt + completion
    # Per token of the whole sequence, then the first dropped, since no position predicts it:
    # position t reads token t and predicts token t + 1.
    logprobs = [0.0] * len(prompt) + list(sampler_logprobs)
    advantages = [0.0] * len(prompt) + [advantage] * len(completion)
    mask = [0.0] * len(prompt) + [1.0] * len(completion)
    return _datum_of(
        {
            "model_input": tokens[:-1],
            "target_tokens": tokens[1:],
            "logprobs": logprobs[1:],
            "advantages": advantages[1:],
            "mask": mask[1:],
        }
    )


_DTYPES = {"target_tokens": torch.int64}


def _datum_of(parts: dict[str, list]) -> tinker.Datum:
    """The datum of `_datum_parts`' lists (a part left out is left out of the datum)."""
    inputs = {
        name: tinker.TensorData.from_torch(
            torch.tensor(values, dtype=_DTYPES.get(name, torch.float32))
        )
        for name, values in parts.items()
        if name != "model_input"
    }
    model_input = tinker.ModelInput.from_ints(parts["model_input"])
    return tinker.Datum(model_input=model_input, loss_fn_inputs=inputs)


def _datum_parts(datum: tinker.Datum) -> dict[str, list]:
    """What a datum holds, as plain lists: its input tokens, then each loss input by name."""
    inputs = {name: tensor.tolist() for name, tensor in datum.loss_fn_inputs.items()}
    return {"model_input": datum.model_input.to_ints(), **inputs}


def same_datum(got: object, expected: tinker.Datum) -> bool:
    """The same input tokens and loss inputs (names, dtypes, values within 1e-5)."""
    if not isinstance(got, tinker.Datum):
        return False
    if got.loss_fn_inputs.keys() != expected.loss_fn_inputs.keys():
        return False
    if got.model_input.to_ints() != expected.model_input.to_ints():
        return False
    return all(
        got.loss_fn_inputs[name].dtype == tensor.dtype
        and same(got.loss_fn_inputs[name].to_torch(), tensor.to_torch())
        for name, tensor in expected.loss_fn_inputs.items()
    )


def _show_datum(datum: tinker.Datum) -> str:
    return "  ".join(f"{name} {values}" for name, values in _datum_parts(datum).items())


def _datum_cases() -> list[Case]:
    return [
        Case(
            "prompt [10, 11], completion [20, 21, 22], advantage 0.75",
            ([10, 11], [20, 21, 22], [-0.5, -1.25, -2.0], 0.75),
        ),
        Case(
            "a negative advantage, a longer prompt", ([5, 6, 7, 8], [30, 31], [-0.25, -3.0], -0.5)
        ),
        Case("a one-token completion (the stop token alone)", ([1, 2, 3], [9], [-0.125], 1.0)),
    ]


def _datum_mistake(
    change: Callable[[dict[str, list], Rollout], None],
) -> Callable[..., tinker.Datum]:
    """A wrong `rollout_datum`: the right datum's parts, with `change` applied to them."""

    def wrong(*rollout: Any) -> tinker.Datum:
        parts = _datum_parts(_datum(*rollout))
        change(parts, rollout)
        return _datum_of(parts)

    return wrong


def _unshifted_targets(parts: dict[str, list], rollout: Rollout) -> None:
    parts["target_tokens"] = parts["model_input"]


def _advantage_on_prompt(parts: dict[str, list], rollout: Rollout) -> None:
    parts["advantages"] = [rollout[3]] * len(parts["advantages"])


def _logprobs_one_late(parts: dict[str, list], rollout: Rollout) -> None:
    prompt, _, sampler_logprobs, _ = rollout
    parts["logprobs"] = ([0.0] * len(prompt) + list(sampler_logprobs))[:-1]


def _first_completion_token_left_out(parts: dict[str, list], rollout: Rollout) -> None:
    prompt, completion, sampler_logprobs, advantage = rollout
    positions = len(parts["mask"])
    parts["logprobs"] = ([0.0] * len(prompt) + list(sampler_logprobs))[:positions]
    parts["advantages"] = ([0.0] * len(prompt) + [advantage] * len(completion))[:positions]
    parts["mask"] = ([0.0] * len(prompt) + [1.0] * len(completion))[:positions]


def _mask_missing(parts: dict[str, list], rollout: Rollout) -> None:
    del parts["mask"]


def _mask_everywhere(parts: dict[str, list], rollout: Rollout) -> None:
    parts["mask"] = [1.0] * len(parts["mask"])


def _whole_sequence_as_input(parts: dict[str, list], rollout: Rollout) -> None:
    prompt, completion, _, _ = rollout
    parts["model_input"] = prompt + completion


DATUM = Exercise(
    name="rollout_datum",
    notebook="03_one_grpo_step",
    minutes=12,
    reference=_datum,
    cases=_datum_cases,
    same=same_datum,
    shown=_show_datum,
    mistakes=[
        Mistake(
            "targets not shifted by one",
            "your target_tokens are the input tokens themselves. Position t must predict the "
            "next token: model_input is every token but the last, target_tokens every token "
            "but the first.",
            _datum_mistake(_unshifted_targets),
        ),
        Mistake(
            "the prompt not masked out (advantage on the prompt)",
            "your prompt positions carry the advantage. The model did not choose the prompt's "
            "tokens, so a position whose target is a prompt token gets advantage 0 (and mask "
            "0, logprob 0); only the positions that predict completion tokens get the "
            "advantage.",
            _datum_mistake(_advantage_on_prompt),
        ),
        Mistake(
            "the sampler's logprobs one position late",
            "your sampler logprobs sit one position late: they line up with the input tokens, "
            "not the targets. Each position's logprob is that of its target token, so build "
            "[0.0] * len(prompt) + sampler_logprobs over the whole sequence and drop its first "
            "entry, as you did for the targets.",
            _datum_mistake(_logprobs_one_late),
        ),
        Mistake(
            "the first completion token left out",
            "your first completion token gets no advantage, mask or logprob: you put "
            "len(prompt) zeros first, but only len(prompt) - 1 positions have a prompt token "
            "as target (the position that reads the prompt's last token predicts the first "
            "completion token). Build each list over the whole sequence, [0.0] * len(prompt) "
            "+ ..., and drop its first entry, as for the targets.",
            _datum_mistake(_first_completion_token_left_out),
        ),
        Mistake(
            "the mask missing",
            "your datum has no 'mask'. Tinker's losses do not read it, but the cookbook's "
            "metrics (and this notebook's tables) do: 0.0 where the target is a prompt token, "
            "1.0 where it is a completion token.",
            _datum_mistake(_mask_missing),
        ),
        Mistake(
            "the mask 1 on the prompt too",
            "your mask is 1 on the prompt positions. It marks the tokens the model chose: 0.0 "
            "where the target is a prompt token, 1.0 where it is a completion token.",
            _datum_mistake(_mask_everywhere),
        ),
        Mistake(
            "the whole sequence as model_input",
            "your model_input holds every token. The last token is never an input (nothing "
            "comes after it to predict), so model_input is every token but the last, as long "
            "as target_tokens.",
            _datum_mistake(_whole_sequence_as_input),
        ),
    ],
)


# -- the importance_sampling loss, by hand -----------------------------------------------


def _importance_sampling_terms(datum: tinker.Datum, logprobs_T: torch.Tensor) -> torch.Tensor:
    sampler_T = datum.loss_fn_inputs["logprobs"].to_torch()
    advantages_T = datum.loss_fn_inputs["advantages"].to_torch()
    return -torch.exp(logprobs_T - sampler_T) * advantages_T


def _loss_cases() -> list[Case]:
    """Datums of two prompt positions and three completion positions, with the learner's
    logprobs away from the sampler's (as after a step), so that each weight differs from 1."""

    def datum(sampler: list[float], advantage: float) -> tinker.Datum:
        return _datum([10, 11, 12], [20, 21, 22], sampler, advantage)

    learner_T = torch.tensor([-4.0, -3.0, -0.25, -1.5, -1.0])
    return [
        Case("advantage 0.5, the learner moved", (datum([-0.5, -1.0, -2.0], 0.5), learner_T)),
        Case("a negative advantage", (datum([-0.1, -2.5, -0.75], -1.25), learner_T)),
        Case(
            "learner and sampler agree (every weight 1)",
            (datum([-0.25, -1.5, -1.0], 2.0), learner_T),
        ),
    ]


def _terms(weight_T: torch.Tensor, datum: tinker.Datum) -> torch.Tensor:
    return -weight_T * datum.loss_fn_inputs["advantages"].to_torch()


def _sampler(datum: tinker.Datum) -> torch.Tensor:
    return datum.loss_fn_inputs["logprobs"].to_torch()


IMPORTANCE_SAMPLING = Exercise(
    name="importance_sampling_terms",
    notebook="03_one_grpo_step",
    minutes=8,
    reference=_importance_sampling_terms,
    cases=_loss_cases,
    mistakes=[
        Mistake(
            "the sampler's logprobs where the learner's belong",
            "every weight you computed is exactly 1: you compared the sampler's logprobs with "
            "themselves. The weight is exp(logprobs_T - sampler logprob), with `logprobs_T` the "
            "learner's logprobs (the argument), and the sampler's from "
            "datum.loss_fn_inputs['logprobs'].",
            lambda datum, logprobs_T: _terms(torch.exp(_sampler(datum) - _sampler(datum)), datum),
        ),
        Mistake(
            "the ratio not exponentiated",
            "you used the difference of the logprobs as the weight. Logprobs are logs: the "
            "importance weight is exp(learner logprob - sampler logprob), 1 when they agree.",
            lambda datum, logprobs_T: _terms(logprobs_T - _sampler(datum), datum),
        ),
        Mistake(
            "the sign flipped",
            "the sign is flipped. Tinker minimises the loss, and a positive advantage must make "
            "its tokens more likely, so each term is minus weight times advantage.",
            lambda datum, logprobs_T: -_terms(torch.exp(logprobs_T - _sampler(datum)), datum),
        ),
        Mistake(
            "the ratio upside down",
            "your weight is upside down: exp(sampler - learner). It is how much more likely the "
            "learner makes the token than the sampler did: exp(learner logprob - sampler "
            "logprob).",
            lambda datum, logprobs_T: _terms(torch.exp(_sampler(datum) - logprobs_T), datum),
        ),
        Mistake(
            "the mean over all positions instead of the per-token terms",
            "you returned one number, the mean over every position (the prompt's included). "
            "Return the per-token terms, one per position, as a tensor shaped like "
            "`logprobs_T`; the cell below sums them, as Tinker's loss:sum does.",
            lambda datum, logprobs_T: _importance_sampling_terms(datum, logprobs_T).mean(),
        ),
        Mistake(
            "the loss summed instead of the per-token terms",
            "you returned the sum, one number. Return the per-token terms, one per position, as "
            "a tensor shaped like `logprobs_T`; the cell below sums them into the loss.",
            lambda datum, logprobs_T: _importance_sampling_terms(datum, logprobs_T).sum(),
        ),
    ],
)
