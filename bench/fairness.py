"""How long an innocent client waits while another attacks the stack: `python -m bench.fairness`.

One stack serves every kernel, so each attack below comes from one client (its own keys)
and the figures are another client's: its one sampling request, and `/healthz`, both sent
once the attack is under way. The issue's targets: the innocent request within 5 s on a
quiet machine, `/healthz` within 1 s.

(a) a flood: 5,000 background sampling requests;
(b) a huge batch: one forward_backward of 2,000 datums of 128 tokens;
(c) slow archives: two LoRA archives on a loopback server that answers after 25 s.

tests/stack/test_fair_stack.py runs the same attacks, smaller, under client timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import os
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import numpy as np
import tinker
from tinker import types

from local_stack.client.tiny_model import sail_lora_metadata
from local_stack.config import client_keys
from local_stack.engine.model import BASE_MODEL_NAME, VOCAB_PATH
from local_stack.engine.vocab import CompactVocab

FLOOD_REQUESTS = 5000
FLOOD_CONCURRENCY = 64
BIG_BATCH_DATUMS = 2000
BIG_BATCH_TOKENS = 128  # per datum (the context holds 256)
SLOW_ARCHIVE_SECONDS = 25.0
ATTACK_HEAD_START_SECONDS = 1.0  # the innocent arrives once the attack is under way
PROMPT = [163594, 14062, 163601]  # a few real Kimi ids the tiny vocabulary knows
RANK = 8  # of the adapter the LoRA attack trains and samples from


@dataclass(frozen=True)
class Client:
    """A client of the stack: its name and keys, as a kernel's own would be."""

    name: str

    @property
    def sail_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {client_keys(self.name)['SAIL_API_KEY']}"}

    @property
    def tinker_key(self) -> str:
        return client_keys(self.name)["TINKER_API_KEY"]


def create_body(*, background: bool, max_tokens: int = 16, lora: str | None = None) -> dict:
    metadata = {"completion_window": "balanced"} | (sail_lora_metadata(lora, RANK) if lora else {})
    return {
        "model": BASE_MODEL_NAME,
        "background": background,
        "raw_prompt_tokens": PROMPT,
        "max_output_tokens": max_tokens,
        "metadata": metadata,
    }


async def innocent_sample(
    session: aiohttp.ClientSession,
    url: str,
    client: Client,
    timeout: float,
    lora: str | None = None,
) -> tuple[float, dict]:
    """One foreground sampling request: its seconds and its final body (TimeoutError if it
    takes longer than `timeout`)."""
    started = time.perf_counter()
    async with session.post(
        f"{url}/v1/responses",
        json=create_body(background=False, lora=lora),
        headers=client.sail_headers,
        timeout=aiohttp.ClientTimeout(total=timeout),
    ) as reply:
        body = await reply.json()
    return time.perf_counter() - started, body


async def healthz(session: aiohttp.ClientSession, url: str, timeout: float) -> float:
    started = time.perf_counter()
    async with session.get(f"{url}/healthz", timeout=aiohttp.ClientTimeout(total=timeout)) as r:
        assert r.status == 200, r.status
    return time.perf_counter() - started


async def flood(session: aiohttp.ClientSession, url: str, attacker: Client, count: int) -> None:
    """Create `count` background responses (48 tokens each), FLOOD_CONCURRENCY at a time."""
    slots = asyncio.Semaphore(FLOOD_CONCURRENCY)

    async def one() -> None:
        async with slots:
            body = create_body(background=True, max_tokens=48)
            async with session.post(
                f"{url}/v1/responses", json=body, headers=attacker.sail_headers
            ) as reply:
                await reply.read()

    await asyncio.gather(*(one() for _ in range(count)))


def datums(count: int, tokens: int = BIG_BATCH_TOKENS, seed: int = 0) -> list[types.Datum]:
    """`count` importance_sampling datums of `tokens` random known tokens."""
    real_ids = CompactVocab.load(VOCAB_PATH).real_ids[1:]  # index 0 is the unknown token
    rng = np.random.default_rng(seed)
    data = []
    for _ in range(count):
        ids = rng.choice(real_ids, size=tokens + 1).tolist()
        data.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(ids[:-1]),
                loss_fn_inputs={
                    "target_tokens": np.array(ids[1:], np.int64),
                    "logprobs": np.full(tokens, -3.0, np.float32),
                    "advantages": rng.normal(size=tokens).astype(np.float32),
                },
            )
        )
    return data


def training_client(url: str, client: Client) -> tinker.TrainingClient:
    service = tinker.ServiceClient(base_url=url, api_key=client.tinker_key)
    return service.create_lora_training_client(base_model=BASE_MODEL_NAME, rank=RANK)


@contextlib.contextmanager
def slow_archive_server(seconds: float) -> Iterator[str]:
    """A loopback server whose every GET answers 404 only after `seconds` (or at exit)."""
    released = threading.Event()

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server spelling)
            released.wait(seconds)
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        released.set()
        server.shutdown()
        server.server_close()


async def own_adapter_url(session: aiohttp.ClientSession, url: str, client: Client) -> str:
    """A sampler checkpoint `client` trains and saves, and the archive URL Tinker hands it."""
    path = await asyncio.to_thread(
        lambda: training_client(url, client).save_weights_for_sampler("fair").result().path
    )
    model_id, _, name = path.removeprefix("tinker://").partition("/sampler_weights/")
    route = f"{url}/api/v1/training_runs/{model_id}/checkpoints/sampler_weights/{name}/archive"
    async with session.get(route, headers={"X-API-Key": client.tinker_key}) as reply:
        return (await reply.json())["url"]


@dataclass(frozen=True)
class Figures:
    innocent_seconds: float
    healthz_seconds: float


async def measure_innocent(
    session: aiohttp.ClientSession,
    url: str,
    innocent: Client,
    timeout: float,
    healthz_timeout: float,
    lora: str | None = None,
) -> Figures:
    """The innocent's sample and a `/healthz`, sent together; both must finish in time."""
    (seconds, body), health = await asyncio.gather(
        innocent_sample(session, url, innocent, timeout, lora),
        healthz(session, url, healthz_timeout),
    )
    # A sampled answer (cut at max_output_tokens: "incomplete"), not an error.
    assert body.get("error") is None and body["output"][0]["content"][0]["token_ids"], body
    return Figures(seconds, health)


async def attack_flood(url: str, count: int, timeout: float, healthz_timeout: float) -> Figures:
    attacker, innocent = Client("floodattacker"), Client("floodinnocent")
    async with aiohttp.ClientSession() as session:
        await flood(session, url, attacker, count)
        return await measure_innocent(session, url, innocent, timeout, healthz_timeout)


async def attack_big_batch(url: str, count: int, timeout: float, healthz_timeout: float) -> Figures:
    attacker, innocent = Client("batchattacker"), Client("batchinnocent")
    trainer = await asyncio.to_thread(training_client, url, attacker)
    data = datums(count)
    step = await asyncio.to_thread(trainer.forward_backward, data, "importance_sampling")
    await asyncio.sleep(ATTACK_HEAD_START_SECONDS)
    async with aiohttp.ClientSession() as session:
        figures = await measure_innocent(session, url, innocent, timeout, healthz_timeout)
    await asyncio.to_thread(step.result)  # the attacker's own work still completes
    return figures


async def attack_slow_archives(
    url: str, slow_seconds: float, timeout: float, healthz_timeout: float
) -> Figures:
    attacker, innocent = Client("archiveattacker"), Client("archiveinnocent")
    async with aiohttp.ClientSession() as session:
        lora = await own_adapter_url(session, url, innocent)
        with slow_archive_server(slow_seconds) as slow_url:
            stalls = [
                asyncio.ensure_future(
                    session.post(
                        f"{url}/v1/responses",
                        json=create_body(background=True, lora=f"{slow_url}/{i}.tar"),
                        headers=attacker.sail_headers,
                    )
                )
                for i in range(2)
            ]
            await asyncio.sleep(ATTACK_HEAD_START_SECONDS)
            measured = asyncio.ensure_future(
                measure_innocent(session, url, innocent, timeout, healthz_timeout, lora=lora)
            )
            await asyncio.wait([measured])
        # The slow server has answered the stalled downloads now: they end at once.
        for reply in await asyncio.gather(*stalls, return_exceptions=True):
            if isinstance(reply, aiohttp.ClientResponse):
                reply.release()
        return measured.result()


def main() -> None:
    from local_stack.client.supervisor import start_local_stack, stop_local_stack

    patient = 600.0  # the figures are the point: no timeout cuts them short
    with tempfile.TemporaryDirectory(prefix="bench-fairness-") as scratch:
        os.environ["COURSE_LOCAL_STACK_DIR"] = scratch
        url = start_local_stack().url
        try:
            print(f"load average before: {os.getloadavg()[0]:.2f} (1 min)")
            attacks = {
                f"(a) {FLOOD_REQUESTS} background requests": lambda: attack_flood(
                    url, FLOOD_REQUESTS, patient, patient
                ),
                f"(b) one {BIG_BATCH_DATUMS}-datum forward_backward": lambda: attack_big_batch(
                    url, BIG_BATCH_DATUMS, patient, patient
                ),
                f"(c) two {SLOW_ARCHIVE_SECONDS:g} s loopback archives": lambda: (
                    attack_slow_archives(url, SLOW_ARCHIVE_SECONDS, patient, patient)
                ),
            }
            print("another client's sampling request and /healthz, during each attack:")
            for label, attack in attacks.items():
                figures = asyncio.run(attack())
                print(
                    f"    {label:42s} sample {figures.innocent_seconds:6.2f} s   "
                    f"/healthz {figures.healthz_seconds:6.3f} s"
                )
            print(f"load average after: {os.getloadavg()[0]:.2f} (1 min)")
        finally:
            stop_local_stack()


if __name__ == "__main__":
    main()
