"""LoRA archives and URLs are hostile input to the local Sail server.

Bombs, sparse files, oversized downloads and impossible configs are refused with a 4xx
while the server stays small and responsive, and the adapter a request gets is always the
one its URL serves. Sail fetches adapters only from the stack's own archive route
(`tests/stack/test_lora_urls.py`), so the hostile archives are planted in the stack's storage.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import io
import json
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from local_stack.engine.model import ADAPTER_CONFIG_PATH, load_base_model
from tests import sail_support as support

COURSE_CONFIG = json.loads(ADAPTER_CONFIG_PATH.read_text())
GIB = 1024**3
MAX_RSS_GROWTH_BYTES = 200 * 1024**2
# Hangs only: a health check stuck behind a blocked event loop gets no answer in this long.
HEALTH_TIMEOUT = 10.0


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE, fmt=tarfile.USTAR_FORMAT):
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(fmt)


def _gzip_bomb(header: bytes) -> bytes:
    """`header` then 1 GiB of zeros, as concatenated gzip members: about 1 MB on the wire."""
    zeros_1mb = gzip.compress(b"\0" * 1024**2)
    return gzip.compress(header) + zeros_1mb * 1024


def _sparse_archive() -> bytes:
    """A PAX 1.0 sparse member that would expand to 10 GiB on extraction."""
    info = tarfile.TarInfo("GNUSparseFile.0/adapter_model.safetensors")
    data = b"1\n0\n512\n".ljust(512, b"\0") + b"x" * 512
    info.size = len(data)
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": "adapter_model.safetensors",
        "GNU.sparse.realsize": str(10 * GIB),
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _with_config(weights: bytes, **changes: object) -> bytes:
    config = json.dumps({**COURSE_CONFIG, **changes}).encode()
    return support.tar_bytes({"adapter_config.json": config, "adapter_model.safetensors": weights})


@dataclass(frozen=True)
class Served:
    urls: dict[str, str]  # name -> the archive URL it is planted at
    plant: Callable[[str, bytes], str]
    adapter_a: Path
    adapter_b: Path


@pytest.fixture(scope="module")
def served(local_stack, tmp_path_factory) -> Served:
    adapter_a = support.save_adapter(tmp_path_factory.mktemp("adapter-a"), seed=1)
    adapter_b = support.save_adapter(tmp_path_factory.mktemp("adapter-b"), seed=2)
    weights = (adapter_a / "adapter_model.safetensors").read_bytes()
    good = support.adapter_tar(adapter_a, "w:gz")
    archives = {
        "a": support.adapter_tar(adapter_a),
        "b": support.adapter_tar(adapter_b),
        "member-bomb": _gzip_bomb(_header("adapter_model.safetensors", GIB)),
        "pax-bomb": _gzip_bomb(_header("././@PaxHeader", GIB, tarfile.XHDTYPE)),
        "sparse": _sparse_archive(),
        "oversized": b"\0" * (64 * 1024**2),
        "truncated": good[: len(good) // 2],
        "not-a-tar": b"<html>not an archive</html>",
        "huge-rank": _with_config(weights, r=1_000_000),
        "huge-rank-pattern": _with_config(weights, rank_pattern={"q_proj": 1_000_000}),
        "layer-replication": _with_config(weights, layer_replication=[[0, 100_000]]),
        "non-utf8-config": support.tar_bytes(
            {"adapter_config.json": b"\xff\xfe{}", "adapter_model.safetensors": weights}
        ),
    }
    plant = functools.partial(support.plant_archive, local_stack.storage_dir, local_stack.url)
    urls = {name: plant(name, data) for name, data in archives.items()}
    urls["missing"] = urls["a"].replace("/a.tar", "/missing.tar")
    return Served(urls, plant, adapter_a, adapter_b)


HOSTILE = [
    ("member-bomb", 413, "expands to more than"),
    ("pax-bomb", 413, "expands to more than"),
    ("sparse", 400, "not a regular file"),
    ("oversized", 413, "larger than"),
    ("truncated", 400, "not a readable tar"),
    ("not-a-tar", 400, "not a readable tar"),
    ("huge-rank", 400, "ranks must be integers from 1 to 32"),
    ("huge-rank-pattern", 400, "ranks must be integers from 1 to 32"),
    ("layer-replication", 400, "layer_replication"),
    ("non-utf8-config", 400, "not UTF-8"),
    ("missing", 400, "HTTP 404"),
]


def _create_with_lora(url: str, lora_url: str):
    metadata = {
        "completion_window": "balanced",
        "lora": lora_url,
        "tinker_adapter_config": json.dumps(COURSE_CONFIG, sort_keys=True),
    }
    return support.post_create(url, support.create_body(metadata=metadata))


@dataclass
class ServerWatch:
    peak_rss: int = 0
    slowest_health: float = 0.0  # printed, not asserted (speed is `make bench`'s)
    unanswered: list[str] = field(default_factory=list)  # health polls that failed
    polls: int = 0


@contextmanager
def watching(url: str, pid: int) -> Iterator[ServerWatch]:
    """Poll `/healthz` and the server's resident memory every 50 ms while the block runs."""
    watch, stop = ServerWatch(), threading.Event()
    process = psutil.Process(pid)

    def poll() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:  # the timeout: a server the hostile requests block does not answer in time
                reply = support.HTTP.request("GET", f"{url}/healthz", timeout=HEALTH_TIMEOUT)
                if reply.status != 200:
                    watch.unanswered.append(f"HTTP {reply.status}")
            except Exception as error:  # noqa: BLE001 (recorded; the test asserts on it)
                watch.unanswered.append(repr(error))
            watch.slowest_health = max(watch.slowest_health, time.monotonic() - started)
            watch.peak_rss = max(watch.peak_rss, process.memory_info().rss)
            watch.polls += 1
            stop.wait(0.05)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        yield watch
    finally:
        stop.set()
        poller.join()


def test_hostile_archives_are_refused_in_bounded_memory(local_stack, renderer, served):
    lora = functools.partial(
        support.make_completer,
        temperature=0.0,
        adapter_config=COURSE_CONFIG,
        tinker_lora_name="good",
    )
    model, vocab = support.load_adapter(served.adapter_a), load_base_model()[1]
    # Warm up: the good adapter loaded once, so the growth measured below is the hostile part.
    support.alongside_good_requests(
        renderer, lora(tinker_lora_signed_url=served.urls["a"]), model, vocab, []
    )
    baseline = psutil.Process(local_stack.pid).memory_info().rss
    calls = [
        functools.partial(_create_with_lora, local_stack.url, served.urls[name])
        for name, *_ in HOSTILE
    ]
    with watching(local_stack.url, local_stack.pid) as watch:
        good = lora(tinker_lora_signed_url=served.urls["a"] + "?sig=2")
        replies = support.alongside_good_requests(renderer, good, model, vocab, calls)
    for (name, status, words), reply in zip(HOSTILE, replies, strict=True):
        assert reply.status == status, (name, reply.data[:300])
        error = reply.json()["error"]
        assert words in error["message"] and error["param"] == "metadata.lora", (name, error)
    print(
        f"{watch.polls} health polls, slowest {watch.slowest_health:.3f} s; "
        f"peak RSS growth {(watch.peak_rss - baseline) / 1024**2:.0f} MB"
    )
    assert watch.polls >= 2 and not watch.unanswered, watch.unanswered
    assert watch.peak_rss - baseline < MAX_RSS_GROWTH_BYTES


def test_same_lora_name_gets_the_adapter_its_url_serves(local_stack, renderer, served):
    """Same `tinker_lora_name`, different URLs, at the same time; then new bytes at a URL."""
    model_a = support.load_adapter(served.adapter_a)
    model_b = support.load_adapter(served.adapter_b)
    vocab = load_base_model()[1]

    def named(name: str):
        return support.make_completer(
            temperature=0.0,
            tinker_lora_signed_url=f"{served.urls[name]}?sig=1",
            adapter_config=COURSE_CONFIG,
            tinker_lora_name="same-name",
        )

    async def both():
        return await asyncio.gather(
            support.sample_async(named("a"), renderer, support.QUESTIONS),
            support.sample_async(named("b"), renderer, support.QUESTIONS),
        )

    results_a, results_b = asyncio.run(both())
    for question, result_a, result_b in zip(support.QUESTIONS, results_a, results_b, strict=True):
        support.assert_logprobs_match(model_a, vocab, renderer, question, result_a)
        support.assert_logprobs_match(model_b, vocab, renderer, question, result_b)
    # The checkpoint behind the URL changed.
    served.plant("a", support.adapter_tar(served.adapter_b))
    try:
        sampling = support.sample_async(named("a"), renderer, support.QUESTIONS[:1])
        (result,) = asyncio.run(sampling)
        support.assert_logprobs_match(model_b, vocab, renderer, support.QUESTIONS[0], result)
    finally:
        served.plant("a", support.adapter_tar(served.adapter_a))
