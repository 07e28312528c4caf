"""The cloud code path, run against the local stack.

There is no cloud here, so this test points the real SDKs' base URLs at a local stack
server and supplies orca-style data and the tokenizer locally. Everything else is what
`backend="cloud"` runs: `connect("cloud")` with its key checks, `load_dataset` of
orca-math (answered locally), `get_tokenizer("moonshotai/Kimi-K2.6")`, one training step
and an evaluation through Sail with a signed URL. The keys it uses (the local stack's,
standing in for yours) and a fake Hugging Face token must appear nowhere it writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.notebook_support import FAKE_KEYS, all_text_under, kernel_env

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import asyncio, json
import datasets
import helpers.backend as backend
from local_stack.client.dataset import arithmetic_dataset
from kimi import register_offline_kimi_tokenizer
from helpers.scoring import MathGroupBuilder
from helpers.training import LoopSettings, evaluate, run_step
from helpers.serving import sail_policy

requested = []
def load_orca_locally(name, split):
    requested.append((name, split))
    rows = datasets.concatenate_datasets(list(arithmetic_dataset().values()))
    return datasets.concatenate_datasets([rows, rows])  # orca-math has 200k rows; we need 2,200

backend.load_dataset = load_orca_locally      # the hub is out of reach here
register_offline_kimi_tokenizer()             # get_tokenizer checks this registry first

async def main():
    course = backend.connect("cloud")
    client = await course.service_client.create_lora_training_client_async(
        base_model=course.model_name, rank=course.adapter_config["r"]
    )
    settings = LoopSettings(
        run_name="cloud-path", group_size=4, learning_rate=2e-3, max_tokens=32,
        temperature=1.0, completion_window="balanced",
    )
    builders = [MathGroupBuilder(row, course.renderer, 4) for row in course.train_rows[:4]]
    record, _ = await run_step(0, builders, settings, client, course)
    policy = await sail_policy(
        client, course.service_client, course.adapter_config, "cloud-path-eval",
        model_name=course.model_name, max_tokens=32, temperature=1.0,
    )
    scores = await evaluate(policy, course.held_out_rows[:8], course.renderer, 2)
    print(json.dumps({"requested": requested, "defaults": course.defaults,
                      "rows": [len(course.train_rows), len(course.held_out_rows)],
                      "record": record, "scores": scores}))

asyncio.run(main())
"""


# The keys `connect("cloud")` reads: the stack's (the only ones it accepts) stand in for
# yours, so they are as secret here as yours would be.
CLOUD_KEYS = {
    "TINKER_API_KEY": "tml-local-stack",
    "SAIL_API_KEY": "sk_local_stack",
    "HF_TOKEN": FAKE_KEYS["HF_TOKEN"],
}


def test_cloud_path_runs_against_the_local_stack(tmp_path: Path) -> None:
    env = kernel_env(tmp_path)  # its own stack folder; the child swaps the fake keys for CLOUD_KEYS
    server_log = (tmp_path / "server.log").open("w")  # the stand-in services' own log
    server = subprocess.Popen(
        [sys.executable, "-m", "local_stack", "serve", "--port", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=server_log,
        text=True,
    )
    try:
        url = json.loads(server.stdout.readline())["url"]
        child_env = {**env, **CLOUD_KEYS, "TINKER_BASE_URL": url, "SAIL_API_URL": url}
        child = subprocess.run(
            [sys.executable, "-c", CHILD],
            env=child_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert child.returncode == 0, child.stderr[-3000:]
        result = json.loads(child.stdout.strip().splitlines()[-1])
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)  # a stop under load can take seconds; a hang cannot
        except subprocess.TimeoutExpired:
            server.kill()
            raise
        finally:
            server_log.close()

    written = [child.stdout, child.stderr, all_text_under(tmp_path)]
    for name, value in CLOUD_KEYS.items():
        assert not any(value in text for text in written), f"{name} leaked"

    assert result["requested"] == [["microsoft/orca-math-word-problems-200k", "train"]]
    assert result["defaults"] == {
        "max_tokens": 1024,
        "learning_rate": 5e-4,
        "steps": 7,
        "eval_problems": 50,
        "eval_samples": 2,
    }
    assert result["rows"] == [2000, 200]
    record, scores = result["record"], result["scores"]
    assert record["dropped_rollouts"] == 0 and scores["samples"] == 16
    for measured in (record, scores):  # MathEnv: reward = correct - 0.1 x (1 - format)
        expected = measured["correct"] - 0.1 * (1 - measured["format"])
        assert measured["reward"] == pytest.approx(expected, abs=1e-9)
    # Every group that was not degenerate trained, four rollouts each.
    assert record["datums"] == round(4 * 4 * (1 - record["degenerate_pct"] / 100))
    assert record["skipped"] == (record["datums"] == 0)
