# Generated from notebooks/09_ship_the_adapter.ipynb by `make helpers`. Do not edit: change
# the `# @save` cells there, then run `make helpers` again.
"""Shipping an adapter's plumbing: the short run shipped when notebook 04 left none, the
base model the converter reads, the archive fetched and unpacked safely, and given tokens
scored with Tinker's `forward` (its logprobs, and their gaps to Sail's).
"""

import json
import random
import shutil
import tarfile
from pathlib import Path
from typing import Any

import aiohttp
import pandas as pd
import tinker

import helpers.adapter_export as export
from helpers.adapter_export import ArchiveEstimate
from helpers.backend import local_base_model_dir
from helpers.notebook_parameters import resolve
from helpers.scoring import MathGroupBuilder
from helpers.training import run_step


async def train_short_run(cfg: Any, course: Any, training_client: Any) -> None:
    """`cfg.short_run_steps` steps of notebook 04's loop, with its settings on this backend
    but for the run name (`<run_name>-short`) and `max_tokens`: what this notebook ships when
    notebook 04 left no run it can load."""
    loop = resolve(
        "04_training_loop", cfg.backend, run_name=f"{cfg.run_name}-short", max_tokens=cfg.max_tokens
    )
    for step in range(cfg.short_run_steps):
        rows = random.Random(f"{cfg.seed}-{step}").sample(course.train_rows, loop.groups_per_step)
        builders = [MathGroupBuilder(row, course.renderer, loop.group_size) for row in rows]
        record, _ = await run_step(step, builders, loop, training_client, course)
        print(f"  step {step:2d}: reward {record['reward']:+.3f}")


def export_plan(course: Any, rank: int, runs_dir: Path) -> tuple[Path, ArchiveEstimate]:
    """The base-model directory `build_lora_adapter` converts against (the model's
    `config.json` and weight names, no weights), and how large the export will be."""
    if course.backend == "local":
        base_model_dir = local_base_model_dir(runs_dir / "base-model-tiny")
        config = json.loads((base_model_dir / "config.json").read_text())
        targets = course.adapter_config["target_modules"]
        return base_model_dir, export.estimate_tiny_llama(config, rank, targets)
    stand_in = export.cloud_base_model_dir(course.model_name, runs_dir / "base-model-stand-in")
    return stand_in, export.estimate_kimi_k26(rank)


async def download_archive(signed_url: str, directory: Path) -> int:
    """Fetch the archive at `signed_url` next to `directory`, unpack only its regular files,
    by their base names, into `directory` (so a hostile archive cannot write elsewhere), then
    delete it. Returns the archive's size in bytes."""
    archive_path = directory.parent / "archive.tar"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(sock_read=300)) as session:
        async with session.get(signed_url) as reply:
            reply.raise_for_status()
            with archive_path.open("wb") as out:
                async for chunk in reply.content.iter_chunked(1024**2):
                    out.write(chunk)
    with tarfile.open(archive_path) as tar:
        for member in filter(tarfile.TarInfo.isfile, tar.getmembers()):
            contents = tar.extractfile(member)
            assert contents is not None  # a regular file always has contents
            with contents, (directory / Path(member.name).name).open("wb") as unpacked:
                shutil.copyfileobj(contents, unpacked)
    size = archive_path.stat().st_size
    archive_path.unlink()
    return size


def scoring_datum(prompt: tinker.ModelInput, completion: list[int]) -> tinker.Datum:
    """Score `completion` after `prompt`: weight 1 on the completion's tokens, 0 on the prompt's."""
    tokens = prompt.to_ints() + completion
    weights = [0.0] * (prompt.length - 1) + [1.0] * len(completion)
    # Plain lists: tinker's Datum turns them into tensors.
    inputs: dict[str, Any] = {"target_tokens": tokens[1:], "weights": weights}
    return tinker.Datum(model_input=tinker.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


async def forward_logprobs(client: tinker.TrainingClient, pairs: list) -> list[list[float]]:
    """Per-token logprobs of each (prompt, completion) pair's completion, from `forward`."""
    data = [scoring_datum(p, c) for p, c in pairs]
    result = await (await client.forward_async(data, "cross_entropy"))
    return [
        out["logprobs"].tolist()[-len(c) :]
        for out, (_, c) in zip(result.loss_fn_outputs, pairs, strict=True)
    ]


def gaps(a: list[list[float]], b: list[list[float]]) -> list[float]:
    """|a - b| token by token, over every completion."""
    return [abs(x - y) for xs, ys in zip(a, b, strict=True) for x, y in zip(xs, ys, strict=True)]


def gap_table(scores: dict[str, list[list[float]]]) -> pd.DataFrame:
    """Each scorer's largest and mean gap to Sail's logprobs (`scores["Sail"]`)."""
    return pd.DataFrame(
        {
            scorer: {"max |x - Sail|": max(gap), "mean |x - Sail|": sum(gap) / len(gap)}
            for scorer, values in scores.items()
            if scorer != "Sail"
            for gap in [gaps(values, scores["Sail"])]
        }
    ).T
