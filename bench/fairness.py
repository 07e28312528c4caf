"""How long an innocent client waits while another attacks the stack: `python -m bench.fairness`.

One stack serves every kernel, so each attack below comes from one client (its own keys)
and the figures are another client's: its one sampling request, and `/healthz`, both sent
once the attack is under way. The issue's targets: the innocent request within 5 s on a
quiet machine, `/healthz` within 1 s.

(a) a flood: 5,000 background sampling requests;
(b) a huge batch: one forward_backward of 2,000 datums of 128 tokens;
(c) slow archives: two LoRA archives of the attacker's that the stack downloads only after
    25 s (its `archive_latency` knob, as slow storage);
(d) huge bodies: three raw forward_backward bodies of 470,000 one-token datums (31 MiB);
(e) metadata: 300 sampling requests with 0.85 MiB of metadata each;
(f) made-up names: the flood of (a) spread over 64 keys that no process registered;
(g) training clients: 100 rank-128 training clients created at once;
(h) checkpoints: 200 `save_state` calls at once.

Every client but (f)'s made-up names is registered as a kernel is (`registered`): the stack
gives registered clients a lane each, and all other names one lane together.

tests/stack/test_fair_stack.py runs the same attacks, smaller, under client timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

import aiohttp
import numpy as np
import tinker
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from local_stack import config, registry
from local_stack.client.tiny_model import sail_lora_metadata
from local_stack.config import client_keys
from local_stack.engine.model import BASE_MODEL_NAME, VOCAB_PATH
from local_stack.engine.vocab import CompactVocab
from local_stack.lanes import REFRESH_SECONDS

FLOOD_REQUESTS = 5000
FLOOD_CONCURRENCY = 64
BIG_BATCH_DATUMS = 2000
BIG_BATCH_TOKENS = 128  # per datum (the context holds 256)
SLOW_ARCHIVE_SECONDS = 25.0
ATTACK_HEAD_START_SECONDS = 1.0  # the innocent arrives once the attack is under way
PROMPT = [163594, 14062, 163601]  # a few real Kimi ids the tiny vocabulary knows
RANK = 8  # of the adapter the LoRA attack trains and samples from
# A raw forward_backward of one-token datums just under the 32 MiB body cap, three at once:
# decoded on the event loop, such bodies stopped every other client for 11-30 s.
HUGE_BODY_DATUMS = 470_000
HUGE_BODY_COPIES = 3
MIN_PROBES = 3  # an attack's figures are the slowest of at least this many probes
METADATA_REQUESTS = 300
METADATA_BYTES = 850 * 1024
MADE_UP_NAMES = 64
TRAINING_CLIENTS = 100
TRAINING_CLIENT_RANK = 128
SAVES = 200


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


@contextlib.contextmanager
def registered(*clients: Client) -> Iterator[None]:
    """Register each client with this process's stack as `connect` registers a kernel, with
    a process of its own (a `sleep` stands in for the kernel), and wait until the stack
    reads its registry again."""
    storage = config.storage_dir()
    stand_ins = [subprocess.Popen(["sleep", "3600"]) for _ in clients]
    try:
        for client, process in zip(clients, stand_ins, strict=True):
            registry.add_client(storage, process.pid, client.name)
        time.sleep(REFRESH_SECONDS)
        yield
    finally:
        for process in stand_ins:
            registry.remove_client(storage, process.pid)
            process.kill()
            process.wait()


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


async def own_adapter_urls(
    session: aiohttp.ClientSession, url: str, client: Client, count: int = 1
) -> list[str]:
    """`count` sampler checkpoints `client` trains and saves, and the archive URLs Tinker
    hands it for them."""
    trainer = await asyncio.to_thread(training_client, url, client)
    urls = []
    for i in range(count):
        future = await asyncio.to_thread(trainer.save_weights_for_sampler, f"fair{i}")
        path = (await asyncio.to_thread(future.result)).path
        model_id, _, name = path.removeprefix("tinker://").partition("/sampler_weights/")
        route = f"{url}/api/v1/training_runs/{model_id}/checkpoints/sampler_weights/{name}/archive"
        async with session.get(route, headers={"X-API-Key": client.tinker_key}) as reply:
            urls.append((await reply.json())["url"])
    return urls


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


async def probe_until(
    attack: asyncio.Future,
    session: aiohttp.ClientSession,
    url: str,
    innocent: Client,
    timeout: float,
    healthz_timeout: float,
) -> Figures:
    """Probe (the innocent's sample and a `/healthz`, together) one after another until
    `attack` is done, and at least MIN_PROBES times: the slowest of each."""
    probes = []
    while not attack.done() or len(probes) < MIN_PROBES:
        probes.append(await measure_innocent(session, url, innocent, timeout, healthz_timeout))
    return Figures(
        max(probe.innocent_seconds for probe in probes),
        max(probe.healthz_seconds for probe in probes),
    )


def huge_forward_backward_body(model_id: str, count: int) -> bytes:
    """A hand-made forward_backward of `count` one-token cross_entropy datums (the SDK
    never sends more than 1024 datums in one request)."""
    datum = pb.Datum()
    chunk = datum.model_input.add()
    chunk.encoded_text.tokens = np.array([PROMPT[0]], np.int32).tobytes()
    for name, dtype, value in (("target_tokens", np.int64, PROMPT[1]), ("weights", np.float32, 1)):
        tensor = datum.loss_fn_inputs[name]
        tensor.dtype = pb.DTYPE_INT64 if dtype is np.int64 else pb.DTYPE_FLOAT32
        tensor.dense = np.array([value], dtype).tobytes()
    message = pb.ForwardBackwardRequest(model_id=model_id, seq_id=1, loss_fn="cross_entropy")
    message.data.extend([datum] * count)
    return message.SerializeToString()


async def attack_huge_bodies(
    url: str, count: int, copies: int, timeout: float, healthz_timeout: float
) -> Figures:
    """`copies` raw forward_backward bodies of `count` one-token datums, sent at once."""
    attacker, innocent = Client("bodyattacker"), Client("bodyinnocent")
    trainer = await asyncio.to_thread(training_client, url, attacker)
    body = await asyncio.to_thread(huge_forward_backward_body, trainer.model_id, count)
    headers = {"X-API-Key": attacker.tinker_key, "Content-Type": "application/x-protobuf"}

    async def send(session: aiohttp.ClientSession) -> None:
        async with session.post(f"{url}/api/v1/forward_backward", data=body, headers=headers) as r:
            await r.read()  # refused (too many datums) or queued: either way, decoded

    return await _probe_during(url, attacker, innocent, send, copies, timeout, healthz_timeout)


async def attack_metadata(
    url: str, count: int, size: int, timeout: float, healthz_timeout: float
) -> Figures:
    """`count` sampling requests with `size` bytes of metadata each, sent at once."""
    attacker, innocent = Client("metaattacker"), Client("metainnocent")
    body = create_body(background=True) | {"metadata": {"filler": "x" * size}}

    async def send(session: aiohttp.ClientSession) -> None:
        async with session.post(
            f"{url}/v1/responses", json=body, headers=attacker.sail_headers
        ) as reply:
            await reply.read()

    return await _probe_during(url, attacker, innocent, send, count, timeout, healthz_timeout)


async def _probe_during(
    url: str,
    attacker: Client,
    innocent: Client,
    send: Callable[[aiohttp.ClientSession], Awaitable[None]],
    copies: int,
    timeout: float,
    healthz_timeout: float,
) -> Figures:
    """The innocent's figures while `copies` of `send` run at once (both clients registered)."""
    with registered(attacker, innocent):
        async with aiohttp.ClientSession() as session:
            attack = asyncio.ensure_future(asyncio.gather(*(send(session) for _ in range(copies))))
            try:
                return await probe_until(attack, session, url, innocent, timeout, healthz_timeout)
            finally:
                await attack


async def attack_made_up_names(
    url: str, names: int, per_name: int, timeout: float, healthz_timeout: float
) -> Figures:
    """A flood of background requests from `names` keys no process registered, then the
    registered innocent's one request."""
    innocent = Client("namesinnocent")
    with registered(innocent):
        async with aiohttp.ClientSession() as session:
            await asyncio.gather(
                *(flood(session, url, Client(f"madeup{i}"), per_name) for i in range(names))
            )
            return await measure_innocent(session, url, innocent, timeout, healthz_timeout)


async def attack_training_clients(
    url: str, count: int, timeout: float, healthz_timeout: float
) -> Figures:
    """`count` rank-128 training clients created at once (those past the cap are refused)."""
    attacker, innocent = Client("runsattacker"), Client("runsinnocent")
    service = tinker.ServiceClient(base_url=url, api_key=attacker.tinker_key)

    def create() -> None:
        with contextlib.suppress(tinker.BadRequestError):
            service.create_lora_training_client(
                base_model=BASE_MODEL_NAME, rank=TRAINING_CLIENT_RANK
            )

    async def send(session: aiohttp.ClientSession) -> None:
        await asyncio.to_thread(create)

    return await _probe_during(url, attacker, innocent, send, count, timeout, healthz_timeout)


async def attack_saves(url: str, count: int, timeout: float, healthz_timeout: float) -> Figures:
    """`count` save_state calls of one training client at once (those past the caps are
    refused)."""
    attacker, innocent = Client("savesattacker"), Client("savesinnocent")
    trainer = await asyncio.to_thread(training_client, url, attacker)
    names = iter(range(count))

    def save() -> None:
        with contextlib.suppress(tinker.BadRequestError, tinker.RequestFailedError):
            trainer.save_state(f"flood{next(names)}").result()

    async def send(session: aiohttp.ClientSession) -> None:
        await asyncio.to_thread(save)

    return await _probe_during(url, attacker, innocent, send, count, timeout, healthz_timeout)


async def attack_flood(url: str, count: int, timeout: float, healthz_timeout: float) -> Figures:
    attacker, innocent = Client("floodattacker"), Client("floodinnocent")
    with registered(attacker, innocent):
        async with aiohttp.ClientSession() as session:
            await flood(session, url, attacker, count)
            return await measure_innocent(session, url, innocent, timeout, healthz_timeout)


async def attack_big_batch(url: str, count: int, timeout: float, healthz_timeout: float) -> Figures:
    attacker, innocent = Client("batchattacker"), Client("batchinnocent")
    with registered(attacker, innocent):
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
    """Two LoRA archives of the attacker's own, which the stack downloads only after
    `slow_seconds` (the attacker's `archive_latency`, as slow storage), while the innocent
    samples from an adapter of its own."""
    attacker, innocent = Client("archiveattacker"), Client("archiveinnocent")
    with registered(attacker, innocent):
        async with aiohttp.ClientSession() as session:
            [lora] = await own_adapter_urls(session, url, innocent)
            slow_loras = await own_adapter_urls(session, url, attacker, count=2)
            config_url, slow = f"{url}/local/config", {"archive_latency": slow_seconds}
            async with session.post(config_url, json=slow, headers=attacker.sail_headers) as r:
                assert r.status == 200, await r.text()
            stalls = [
                asyncio.ensure_future(
                    session.post(
                        f"{url}/v1/responses",
                        json=create_body(background=True, lora=slow_lora),
                        headers=attacker.sail_headers,
                    )
                )
                for slow_lora in slow_loras
            ]
            try:
                await asyncio.sleep(ATTACK_HEAD_START_SECONDS)
                figures = await measure_innocent(
                    session, url, innocent, timeout, healthz_timeout, lora=lora
                )
                # Accepted, and still downloading: the figures are a slow download's.
                assert not any(stall.done() for stall in stalls), stalls
                return figures
            finally:
                for stall in stalls:  # the stack finishes the slow downloads by itself
                    stall.cancel()
                async with session.delete(config_url, headers=attacker.sail_headers):
                    pass


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
                f"(c) two {SLOW_ARCHIVE_SECONDS:g} s archive downloads": lambda: (
                    attack_slow_archives(url, SLOW_ARCHIVE_SECONDS, patient, patient)
                ),
                f"(d) {HUGE_BODY_COPIES} raw {HUGE_BODY_DATUMS}-datum bodies": lambda: (
                    attack_huge_bodies(url, HUGE_BODY_DATUMS, HUGE_BODY_COPIES, patient, patient)
                ),
                f"(e) {METADATA_REQUESTS} requests, big metadata": lambda: attack_metadata(
                    url, METADATA_REQUESTS, METADATA_BYTES, patient, patient
                ),
                f"(f) (a) over {MADE_UP_NAMES} made-up names": lambda: attack_made_up_names(
                    url, MADE_UP_NAMES, FLOOD_REQUESTS // MADE_UP_NAMES, patient, patient
                ),
                f"(g) {TRAINING_CLIENTS} training clients at once": lambda: attack_training_clients(
                    url, TRAINING_CLIENTS, patient, patient
                ),
                f"(h) {SAVES} save_state calls at once": lambda: attack_saves(
                    url, SAVES, patient, patient
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
