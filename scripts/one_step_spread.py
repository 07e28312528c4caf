"""How much do notebook 03's after-the-step numbers vary from seed to seed? The instructor
guide quotes the ranges this prints, because one run's values are not what to expect.

Runs notebook 03's step at its local defaults (16 groups of 8, learning rate 1e-4,
temperature 1, Adam with beta2 0.95) once per seed, with the notebook's own helpers, and
prints per seed, then as a range: the mean logprob change of positive- and negative-advantage
completions, which side moved further, `kl_sample_train` v1 and v2 after the step, and the
`optim/grad_norm` the optimizer step reports.
About 30 s per seed on two cores, on the local backend only.

    python scripts/one_step_spread.py --seeds 8
"""

from __future__ import annotations

import argparse
import asyncio

import tinker
from step_effect import measure_one_step  # scripts/step_effect.py, beside this script
from tinker_cookbook.rl.metrics import compute_kl_sample_train

import helpers
from helpers.inspect_step import without_mask
from helpers.notebook_parameters import resolve

NOTEBOOK = "03_one_grpo_step"


async def one_step(course, seed: int) -> dict[str, float]:
    """Notebook 03's step for one seed: the numbers its prose used to quote."""
    cfg = resolve(NOTEBOOK)  # its local defaults

    grad_norms: list[float] = []

    async def train_once(client, data_D: list[tinker.Datum]) -> None:
        sent_D = [without_mask(d) for d in data_D]
        await (
            await client.forward_backward_async(sent_D, loss_fn="importance_sampling")
        ).result_async()
        adam = tinker.AdamParams(learning_rate=cfg.learning_rate, beta1=0.9, beta2=0.95, eps=1e-8)
        stepped = await (await client.optim_step_async(adam)).result_async()
        grad_norms.append(stepped.metrics["optim/grad_norm"])

    effect = await measure_one_step(
        course,
        seed,
        train_once,
        name="one-step-spread",
        max_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
    )
    kl = compute_kl_sample_train(effect.data_D, effect.after_D)
    return {
        "positive": effect.positive,
        "negative": effect.negative,
        "v1": kl["optim/kl_sample_train_v1"],
        "v2": kl["optim/kl_sample_train_v2"],
        "grad_norm": grad_norms[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=8, help="seeds 0 to this - 1 (at least 5)")
    seeds = range(max(5, parser.parse_args().seeds))
    course = helpers.connect("local")
    results = {}
    for seed in seeds:  # one at a time: the numbers must not depend on batching across seeds
        results[seed] = asyncio.run(one_step(course, seed))
        r = results[seed]
        further = "negative" if abs(r["negative"]) > abs(r["positive"]) else "positive"
        print(
            f"seed {seed}: positive {r['positive']:+.4f} nats, negative {r['negative']:+.4f} "
            f"({further} further); KL after v1 {r['v1']:.2e}, v2 {r['v2']:.2e}; "
            f"grad_norm {r['grad_norm']:.1f}"
        )
    for key in ("positive", "negative", "v1", "v2", "grad_norm"):
        values = [r[key] for r in results.values()]
        print(f"{key}: {min(values):+.2e} to {max(values):+.2e} over {len(values)} seeds")
    negative_further = sum(abs(r["negative"]) > abs(r["positive"]) for r in results.values())
    v1_above = sum(r["v1"] > r["v2"] for r in results.values())
    print(f"negative side further in {negative_further} of {len(results)} seeds")
    print(f"v1 above v2 in {v1_above} of {len(results)} seeds")


if __name__ == "__main__":
    main()
