"""The tiny shell model beside the arithmetic one: the local stack trains and samples either by
name, and notebook 04's loop runs a real sandboxed step with it."""

from __future__ import annotations

import asyncio

import pytest
import tinker

import helpers
from helpers.serving import sail_policy
from helpers.training import LoopSettings, run_step
from kimi import MODEL_NAME
from local_stack.engine.model import BASE_MODEL_DIRS, SHELL_MODEL_NAME, load_base_model
from shell_tasks import task_family
from shell_tasks.sandboxes import sandbox_factory
from shell_tasks.shell_env import task_messages
from shell_tasks.shell_rl import LOCAL_SHELL_MODEL, group_builders, scripts_run, shell_course

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # tinker deprecates archive URLs


def test_the_shell_model_is_registered_under_the_name_notebook_07_uses() -> None:
    assert LOCAL_SHELL_MODEL == SHELL_MODEL_NAME in BASE_MODEL_DIRS
    shell, shell_vocab = load_base_model(SHELL_MODEL_NAME)
    arithmetic, arithmetic_vocab = load_base_model()
    assert shell.name_or_path == SHELL_MODEL_NAME and arithmetic.name_or_path == MODEL_NAME
    assert shell_vocab != arithmetic_vocab
    with pytest.raises(ValueError, match="no base model"):
        load_base_model("moonshotai/Kimi-K2.5")


def test_both_base_models_train_and_sample_by_name(local_stack, tmp_path) -> None:
    async def scenario() -> None:
        course = shell_course(helpers.connect("local"))
        capabilities = await course.service_client.get_server_capabilities_async()
        served = {model.model_name for model in capabilities.supported_models}
        assert served == {MODEL_NAME, SHELL_MODEL_NAME}

        training_client = await course.service_client.create_lora_training_client_async(
            base_model=SHELL_MODEL_NAME, rank=course.adapter_config["r"], seed=0
        )
        policy = await sail_policy(
            training_client,
            course.service_client,
            course.adapter_config,
            "two-models",
            model_name=SHELL_MODEL_NAME,
            max_tokens=40,
            temperature=1.0,
        )
        item = task_family.instance("held_out", 0)
        prompt = course.renderer.build_generation_prompt(
            task_messages(item.instruction, task_family.WORKDIR)
        )
        stop = course.renderer.get_stop_sequences()
        samples = await asyncio.gather(*(policy(prompt, stop) for _ in range(8)))
        shell_ids = set(load_base_model(SHELL_MODEL_NAME)[1].real_ids)
        assert all(set(sampled.tokens) <= shell_ids for sampled in samples)
        # The base model writes a bash block in about 9 replies of 10.
        texts = [course.tokenizer.decode(sampled.tokens) for sampled in samples]
        assert sum("</think>```bash\n" in text for text in texts) >= 4, texts

        # The same LoRA, asked of the other base model, is refused in one sentence.
        other = type(policy)(
            checkpoint_path=policy.checkpoint_path,
            service_client=policy.service_client,
            ttl_seconds=policy.ttl_seconds,
            model=MODEL_NAME,
            max_tokens=8,
            temperature=1.0,
            tinker_lora_signed_url=policy.tinker_lora_signed_url,
            adapter_config=course.adapter_config,
            tinker_lora_name="two-models",
        )
        with pytest.raises(Exception, match="trained on 'course/tiny-shell'"):
            await other(prompt, stop)

        # A checkpoint of one base model does not load into a run of the other.
        saved = await (await training_client.save_state_async("shell-state")).result_async()
        arithmetic_client = await course.service_client.create_lora_training_client_async(
            base_model=MODEL_NAME, rank=course.adapter_config["r"]
        )
        with pytest.raises(tinker.TinkerError, match="was trained on"):
            await (await arithmetic_client.load_state_async(saved.path)).result_async()

    asyncio.run(scenario())


def test_one_sandboxed_step_of_notebook_04s_loop_trains(local_stack, tmp_path) -> None:
    async def scenario() -> tuple[dict, list]:
        course = shell_course(helpers.connect("local"))
        training_client = await course.service_client.create_lora_training_client_async(
            base_model=course.model_name, rank=course.adapter_config["r"], seed=0
        )
        settings = LoopSettings("shell-step", 8, 2e-3, 40, 1.0, "balanced")
        task_dirs = task_family.write_tasks("train", 4, tmp_path)
        builders = group_builders(task_dirs, sandbox_factory("local"), 8, course.model_name)
        return await run_step(0, builders, settings, training_client, course)

    record, groups = asyncio.run(scenario())
    # Every rollout with a bash block ran it, and its script is in the logs.
    with_a_block = [
        t for g in groups for t in g.trajectories_G if t.transitions[-1].metrics["has_bash_block"]
    ]
    assert len(scripts_run(groups)) == len(with_a_block)
    assert 0.0 <= record["reward"] <= 1.0 and record["dropped_rollouts"] == 0
    assert record["grading_error"] == 0.0 and record["has_bash_block"] > 0.5
    # 4 groups of 8 from a base model right a third of the time: some group varies.
    assert not record["skipped"] and record["datums"] > 0
    assert record["sampled_tokens"] > 0


def test_the_shipped_vocabulary_is_the_one_todays_prompts_and_replies_need(renderer) -> None:
    """Changing the system prompt or the family's instructions needs a rebuild of the shell
    model (`scripts/build_tiny_shell_base.py`): its prompts would hold unknown tokens."""
    from scripts.build_tiny_shell_base import build_vocab

    assert build_vocab(renderer) == load_base_model(SHELL_MODEL_NAME)[1]
