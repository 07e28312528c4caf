"""Learning is a test: training through the real SDKs moves the model the way the reward says.

A sign error or a dropped gradient anywhere between the SDK and the trainer (the datum's
wire decoding, the loss, the backward pass, the optimizer, the adapter Sail serves) makes
the model move the wrong way or not at all, and one of these fails:

- one optimizer step on fixed data, where the outcome is deterministic: the completion
  with a positive advantage gains log-probability and the one with a negative advantage
  loses it;
- a short RL run with the course's own loop (`helpers.training.run_step`) on four
  problems: the reward on those problems rises, measured with enough samples that noise
  cannot fake it.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tinker
from tinker import types

from kimi import MODEL_NAME
from local_stack.client.control_client import set_knobs
from local_stack.client.supervisor import start_local_stack

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # tinker deprecates archive URLs

ADAPTER_CONFIG = json.loads(
    (Path(__file__).resolve().parents[2] / "tinker_adapter_config.json").read_text()
)
# One Adam step at this rate moves the 13-token completion's log-probability (-20.9 under
# the base model) by +3.3 to +3.5 nats for advantage +1 and -2.5 to -2.6 for -1 (measured
# with LoRA seeds 0-3; each is deterministic). At 1e-2 the step overshoots: both directions
# rise. A sign error gives the opposite sign, a lost gradient or update about 0.
ONE_STEP_LEARNING_RATE = 1e-3
ONE_STEP_MIN_NATS = 1.0


def datum(prompt: list[int], completion: list[int], **inputs: float | np.ndarray) -> types.Datum:
    """A Datum for `prompt + completion`. A number for a loss input is its value on each of
    the completion's targets (0 on the prompt's); an array is taken as it is."""
    tokens = prompt + completion
    loss_inputs = {"target_tokens": np.array(tokens[1:], np.int64)}
    for name, value in inputs.items():
        if np.isscalar(value):
            value = np.where(np.arange(len(tokens) - 1) < len(prompt) - 1, 0.0, value)
        loss_inputs[name] = np.asarray(value, np.float32)
    return types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=loss_inputs
    )


def completion_logprob(client, data: list[types.Datum], prompt_length: int) -> list[float]:
    """Each datum's summed log-probability of its completion under the current weights."""
    result = client.forward(data, "cross_entropy").result()
    return [
        float(out["logprobs"].to_numpy()[prompt_length - 1 :].sum())
        for out in result.loss_fn_outputs
    ]


@pytest.fixture
def prompt_and_completion(renderer) -> tuple[list[int], list[int]]:
    prompt = renderer.build_generation_prompt([{"role": "user", "content": "What is 3 plus 4?"}])
    completion = renderer.tokenizer.encode("</think>The answer is \\boxed{7}.<|im_end|>")
    return prompt.to_ints(), completion


@pytest.fixture
def training_client(local_stack):
    start_local_stack()  # the session's stack; this points the SDKs back at it
    return tinker.ServiceClient().create_lora_training_client(
        base_model=MODEL_NAME, rank=ADAPTER_CONFIG["r"], seed=0
    )


@pytest.mark.parametrize("advantage", [1.0, -1.0])
def test_one_step_follows_the_sign_of_the_advantage(
    training_client, prompt_and_completion, advantage: float
):
    """importance_sampling through the SDK: a positive advantage makes the completion more
    likely, a negative one less; the forward-only loss is the loss that was trained on."""
    prompt, completion = prompt_and_completion
    as_weights = [datum(prompt, completion, weights=1.0)]
    before = completion_logprob(training_client, as_weights, len(prompt))
    # On-policy, as in the course's loop: the sampler's logprobs are the model's, ratios 1.
    [sampled] = training_client.forward(as_weights, "cross_entropy").result().loss_fn_outputs
    data = [
        datum(prompt, completion, advantages=advantage, logprobs=sampled["logprobs"].to_numpy())
    ]

    forward_only = training_client.forward(data, "importance_sampling").result()
    result = training_client.forward_backward(data, "importance_sampling").result()
    training_client.optim_step(types.AdamParams(learning_rate=ONE_STEP_LEARNING_RATE)).result()
    after = completion_logprob(training_client, as_weights, len(prompt))

    # The loss is -sum(ratio * advantage): with ratios of 1, -advantage per completion token.
    assert result.metrics["loss:sum"] == pytest.approx(-advantage * len(completion), abs=1e-3)
    assert forward_only.metrics["loss:sum"] == pytest.approx(result.metrics["loss:sum"], abs=1e-5)
    moved = after[0] - before[0]
    assert moved * advantage > ONE_STEP_MIN_NATS, (
        f"log-probability {before[0]:.3f} -> {after[0]:.3f}"
    )


def test_one_cross_entropy_step_raises_the_weighted_completion(
    training_client, prompt_and_completion
):
    prompt, completion = prompt_and_completion
    data = [datum(prompt, completion, weights=1.0)]
    before = completion_logprob(training_client, data, len(prompt))
    training_client.forward_backward(data, "cross_entropy").result()
    training_client.optim_step(types.AdamParams(learning_rate=ONE_STEP_LEARNING_RATE)).result()
    after = completion_logprob(training_client, data, len(prompt))
    assert after[0] - before[0] > ONE_STEP_MIN_NATS, f"{before[0]:.3f} -> {after[0]:.3f}"


# The RL run: four training problems the base model gets right 30-60% of the time.
RL_PROBLEMS = 4
RL_GROUP_SIZE = 16
RL_STEPS = 6
RL_LEARNING_RATE = 3e-3
RL_EVAL_SAMPLES = 64  # per problem: 256 samples, a standard error of about 0.03
# Measured over seeds 0-6 (LoRA init and sampling): reward gains +0.25 to +0.54, mean +0.43,
# from a start of 0.32-0.40. A run that does not learn gains 0 +- 0.045 (two such means).
RL_MIN_GAIN = 0.15


def test_a_short_rl_run_raises_the_reward_on_the_problems_it_trains_on(local_stack, renderer):
    from helpers.scoring import MathGroupBuilder
    from helpers.serving import sail_policy
    from helpers.training import LoopSettings, evaluate, run_step
    from local_stack.client.dataset import arithmetic_dataset

    start_local_stack()
    rows = arithmetic_dataset()["train"].to_list()[:RL_PROBLEMS]
    settings = LoopSettings(
        run_name="learning-test",
        group_size=RL_GROUP_SIZE,
        learning_rate=RL_LEARNING_RATE,
        max_tokens=24,
        temperature=1.0,
        completion_window="balanced",
    )
    service_client = tinker.ServiceClient()
    course = SimpleNamespace(
        service_client=service_client,
        adapter_config=ADAPTER_CONFIG,
        model_name=MODEL_NAME,
        renderer=renderer,
    )

    async def main() -> tuple[dict, dict]:
        training_client = await service_client.create_lora_training_client_async(
            base_model=MODEL_NAME, rank=ADAPTER_CONFIG["r"], seed=0
        )

        async def score(name: str) -> dict:
            policy = await sail_policy(
                training_client, service_client, ADAPTER_CONFIG, name,
                model_name=MODEL_NAME, max_tokens=24, temperature=1.0,
            )  # fmt: skip
            set_knobs(local_stack.url, seed=1)
            return await evaluate(policy, rows, renderer, RL_EVAL_SAMPLES)

        before = await score("learning-test-before")
        for step in range(RL_STEPS):
            set_knobs(local_stack.url, seed=100 + step)
            builders = [MathGroupBuilder(row, renderer, RL_GROUP_SIZE) for row in rows]
            await run_step(step, builders, settings, training_client, course)
        return before, await score("learning-test-after")

    set_knobs(local_stack.url, latency=0.0, faults={})
    try:
        before, after = asyncio.run(main())
    finally:
        set_knobs(local_stack.url, seed=0)
    assert before["samples"] == after["samples"] == RL_PROBLEMS * RL_EVAL_SAMPLES
    gain = after["reward"] - before["reward"]
    assert gain > RL_MIN_GAIN, f"reward {before['reward']:+.3f} -> {after['reward']:+.3f}"
