"""RL on the local stack, measured: `python -m bench.rl`.

(a) Learning is real: the guide's GRPO loop (sections 2 and 3, through the real tinker, sail
    and tinker-cookbook SDKs) trains on the arithmetic set's train split, and the held-out
    reward is measured before and after, sampled with a fixed seed. Format rate and accuracy
    given correct format are shown separately, so a gain from format alone is visible.
(b) One local RL step's time, split into save+serve (checkpoint, signed URL, Sail loading
    the adapter), rollouts (sampling and scoring) and training (forward_backward + optim_step).

The defaults are the ones notebook 03 should use on the local backend.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import statistics
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from local_stack.control.client import set_knobs

REPO_ROOT = Path(__file__).resolve().parents[1]
MODEL = "moonshotai/Kimi-K2.6"


@dataclass(frozen=True)
class Hyperparams:
    """What the loop runs with; the defaults are the tuned local ones."""

    group_size: int = 8
    groups_per_step: int = 8
    learning_rate: float = 1e-3
    steps: int = 80
    temperature: float = 1.0
    max_tokens: int = 24  # a well-formed answer takes at most 18 tokens
    rank: int = 32
    time_budget_seconds: float = 60.0


@dataclass(frozen=True)
class HeldOut:
    """Held-out scores: mean MathEnv reward, format rate, accuracy among well-formatted."""

    rewards: list[float]
    format_rate: float
    accuracy_given_format: float

    @property
    def reward(self) -> float:
        return statistics.fmean(self.rewards)

    @property
    def standard_error(self) -> float:
        return statistics.stdev(self.rewards) / len(self.rewards) ** 0.5

    def line(self) -> str:
        return (
            f"reward {self.reward:+.3f} ± {self.standard_error:.3f} | format "
            f"{self.format_rate:.3f} | accuracy given format {self.accuracy_given_format:.3f} | "
            f"n={len(self.rewards)}"
        )


@dataclass(frozen=True)
class StepTime:
    save_and_serve: float
    rollouts: float
    training: float

    @property
    def total(self) -> float:
        return self.save_and_serve + self.rollouts + self.training


@dataclass
class Loop:
    """The clients and data of one run of the guide's loop."""

    hp: Hyperparams
    service_client: Any
    training_client: Any
    renderer: Any
    adapter_config: dict

    async def sail_policy(self, name: str):
        """The guide's section 2, with the sampling settings as parameters."""
        import sail

        save_future = await self.training_client.save_weights_for_sampler_async(
            name, ttl_seconds=3600
        )
        save_result = await save_future
        with warnings.catch_warnings():  # tinker 0.35 deprecates the archive-URL call sail makes
            warnings.simplefilter("ignore", FutureWarning)
            signed_url = await sail.get_tinker_checkpoint_signed_url_async(
                self.service_client, save_result.path, ttl_seconds=3600
            )
        return sail.SailTokenCompleter(
            model=MODEL,
            max_tokens=self.hp.max_tokens,
            temperature=self.hp.temperature,
            completion_window="balanced",
            tinker_lora_signed_url=signed_url,
            adapter_config=self.adapter_config,
            tinker_lora_name=name,
        )

    async def rollouts(self, policy, rows: list[dict], group_size: int) -> list:
        from tinker_cookbook.rl.rollouts import do_group_rollout

        from helpers.scoring import MathGroupBuilder

        builders = [
            MathGroupBuilder(row=r, renderer=self.renderer, group_size=group_size) for r in rows
        ]
        return list(await asyncio.gather(*(do_group_rollout(b, policy) for b in builders)))

    async def step(
        self, name: str, rows: list[dict], *, load_adapter_first: bool
    ) -> tuple[list, StepTime]:
        """The guide's section 3 loop body, timed.

        With `load_adapter_first`, a 1-token request makes Sail fetch the new adapter before
        the rollouts start, so fetching it counts as serving rather than as rollouts.
        """
        import sail
        from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
        from tinker_cookbook.rl.train import train_step

        t0 = time.perf_counter()
        policy = await self.sail_policy(name)
        if load_adapter_first:
            probe = sail.SailTokenCompleter(
                model=MODEL,
                max_tokens=1,
                tinker_lora_signed_url=policy.tinker_lora_signed_url,
                adapter_config=self.adapter_config,
                tinker_lora_name=name,
            )
            prompt = self.renderer.build_generation_prompt([{"role": "user", "content": "1+1"}])
            await probe(prompt, self.renderer.get_stop_sequences())
        t1 = time.perf_counter()
        groups = await self.rollouts(policy, rows, self.hp.group_size)
        t2 = time.perf_counter()
        training_groups, _ = split_degenerate_groups(groups)
        if training_groups:  # the guide raises here; a benchmark just skips the update
            advantages = compute_advantages(training_groups)
            data, _ = assemble_training_data(training_groups, advantages)
            await train_step(
                data_D=data,
                training_client=self.training_client,
                learning_rate=self.hp.learning_rate,
                num_substeps=1,
                loss_fn="importance_sampling",
                metrics={},
            )
        return groups, StepTime(t1 - t0, t2 - t1, time.perf_counter() - t2)

    async def held_out(
        self, name: str, rows: list[dict], samples_per_row: int, sail_url: str, seed: int
    ) -> HeldOut:
        """Samples of every held-out problem from the current weights, scored by MathEnv."""
        policy = await self.sail_policy(name)
        set_knobs(sail_url, seed=seed)  # fix the local Sail sampler's random stream
        groups = await self.rollouts(policy, rows, group_size=samples_per_row)
        metrics = [t.transitions[-1].metrics for g in groups for t in g.trajectories_G]
        formatted = sum(m["format"] for m in metrics)
        return HeldOut(
            rewards=[float(r) for g in groups for r in g.get_total_rewards()],
            format_rate=formatted / len(metrics),
            accuracy_given_format=sum(m["correct"] * m["format"] for m in metrics)
            / max(formatted, 1),
        )


def split_degenerate_groups(groups: list) -> tuple[list, list]:
    """The guide's: groups whose rewards all match carry no GRPO signal."""
    kept, degenerate = [], []
    for group in groups:
        rewards = [float(r) for r in group.get_total_rewards()]
        (degenerate if rewards and len(set(rewards)) == 1 else kept).append(group)
    return kept, degenerate


async def run(hp: Hyperparams, eval_samples_per_problem: int, seed: int) -> None:
    import tinker
    from tinker_cookbook import renderers
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    from helpers.data import arithmetic_dataset
    from helpers.kimi import register_offline_kimi_tokenizer
    from local_stack.supervisor import start_local_stack, stop_local_stack

    # sail's archive-URL call logs a deprecation error and a warning on every step.
    logging.getLogger("tinker.lib.public_interfaces.rest_client").setLevel(logging.CRITICAL)
    started = time.perf_counter()
    stack = start_local_stack()
    print(f"local stack up in {time.perf_counter() - started:.1f} s at {stack.url}")
    try:
        register_offline_kimi_tokenizer()
        service_client = tinker.ServiceClient()
        loop = Loop(
            hp,
            service_client,
            await service_client.create_lora_training_client_async(
                base_model=MODEL, rank=hp.rank, seed=seed
            ),
            renderers.get_renderer("kimi_k26", tokenizer=get_tokenizer(MODEL)),
            json.loads((REPO_ROOT / "tinker_adapter_config.json").read_text()),
        )
        splits = arithmetic_dataset()
        train_rows, held_out_rows = list(splits["train"]), list(splits["held_out"])
        rng = random.Random(seed)

        before = await loop.held_out(
            "bench-before", held_out_rows, eval_samples_per_problem, stack.url, seed
        )
        print(f"held-out before: {before.line()}")
        loop_started, steps, last = time.perf_counter(), 0, 0.0
        # Stop before a step that would likely end past the time budget.
        while (
            steps < hp.steps and time.perf_counter() - loop_started + last <= hp.time_budget_seconds
        ):
            rows = rng.sample(train_rows, hp.groups_per_step)
            groups, took = await loop.step(f"bench-step-{steps}", rows, load_adapter_first=False)
            rewards = [float(r) for g in groups for r in g.get_total_rewards()]
            print(f"step {steps:2d} | reward {statistics.fmean(rewards):+.3f} | {took.total:.2f} s")
            steps, last = steps + 1, took.total
        training_seconds = time.perf_counter() - loop_started
        after = await loop.held_out(
            "bench-after", held_out_rows, eval_samples_per_problem, stack.url, seed
        )
        print(f"held-out after:  {after.line()}")

        timed = []
        for i in range(3):
            rows = rng.sample(train_rows, hp.groups_per_step)
            timed.append((await loop.step(f"bench-timed-{i}", rows, load_adapter_first=True))[1])
        split = StepTime(
            *(statistics.median(getattr(t, f.name) for t in timed) for f in fields(StepTime))
        )
    finally:
        stop_local_stack()

    gain_se = (before.standard_error**2 + after.standard_error**2) ** 0.5
    print(
        f"\n(a) learning: {steps} steps in {training_seconds:.1f} s of training wall time\n"
        f"    held-out reward {before.reward:+.3f} -> {after.reward:+.3f} "
        f"(gain {after.reward - before.reward:+.3f} ± {gain_se:.3f}); "
        f"format {before.format_rate:.3f} -> {after.format_rate:.3f}; accuracy given format "
        f"{before.accuracy_given_format:.3f} -> {after.accuracy_given_format:.3f}\n"
        f"    hyperparameters: {json.dumps(asdict(hp))}, seed {seed}\n"
        f"(b) one local RL step ({hp.groups_per_step} groups x {hp.group_size} rollouts, median "
        f"of 3): save+serve {split.save_and_serve:.2f} s | rollouts {split.rollouts:.2f} s | "
        f"training {split.training:.2f} s | total {split.total:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, value in asdict(Hyperparams()).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument(
        "--eval-samples-per-problem", type=int, default=2, help="of the 400 held-out problems"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = vars(parser.parse_args())
    eval_samples, seed = args.pop("eval_samples_per_problem"), args.pop("seed")
    # A benchmark's checkpoints are throwaway: keep them out of the course's storage.
    os.environ["COURSE_LOCAL_STACK_DIR"] = tempfile.mkdtemp(prefix="bench-rl-")
    asyncio.run(run(Hyperparams(**args), eval_samples, seed))


if __name__ == "__main__":
    main()
