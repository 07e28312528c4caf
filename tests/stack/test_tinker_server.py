"""The local Tinker server, driven by the real tinker 0.35 / sail / tinker-cookbook SDKs.

Most tests run the Tinker routes alone on a loopback port in this process (so they can
reach into the server: its trainers, its clock). The guide test runs the whole local stack
(Tinker and Sail in one subprocess), exactly as a notebook does.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import random
import socket
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.torch
import tinker
import torch
from aiohttp import web
from tinker import types

from local_stack.engine.checkpoints import CheckpointRef
from local_stack.tinker import futures
from local_stack.tinker.futures import RequestSequencer
from local_stack.tinker.routes import SERVICE, mount_tinker
from local_stack.tinker.service import TinkerService
from tests.tinker_datums import MODEL, rl_datum

REPO_ROOT = Path(__file__).resolve().parents[2]
# A refused request answers at once; this bound only fails a request that hangs.
HANG_SECONDS = 60.0

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")  # tinker deprecates archive URLs


@dataclass
class InProcessTinker:
    """The Tinker routes served from a background thread, like the stack serves them."""

    url: str
    app: web.Application
    runner: web.AppRunner
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread

    @property
    def service(self) -> TinkerService:
        return self.app[SERVICE]

    def client(self, **kwargs) -> tinker.ServiceClient:
        return tinker.ServiceClient(base_url=self.url, api_key="tml-local-stack", **kwargs)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()


def start_tinker(storage: Path) -> InProcessTinker:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    app = web.Application()
    mount_tinker(app, storage, url)
    runner = web.AppRunner(app)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    def serve() -> None:
        loop.run_until_complete(runner.setup())
        loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait()
    return InProcessTinker(url, app, runner, loop, thread)


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[InProcessTinker]:
    with pytest.MonkeyPatch.context() as env:
        for name in ("NO_PROXY", "no_proxy"):  # a proxy must never see loopback calls
            env.setenv(name, ",".join(filter(None, [os.environ.get(name), "127.0.0.1"])))
        running = start_tinker(tmp_path_factory.mktemp("tinker-storage"))
        yield running
        running.stop()


@contextlib.contextmanager
def fails_fast(error: type[BaseException], match: str | None = None) -> Iterator[None]:
    """The SDK raises `error`, the class of a 4xx it does not retry (it retries 408, 409, 429,
    5xx and answers marked `x-should-retry`), so no minutes of retries came first."""
    with pytest.raises(error, match=match):
        yield


async def train(training_client, steps: int, learning_rate: float = 1e-2) -> None:
    data = [rl_datum(seed=s) for s in range(4)]
    for _ in range(steps):
        fwdbwd = await training_client.forward_backward_async(data, "importance_sampling")
        optim = await training_client.optim_step_async(
            types.AdamParams(learning_rate=learning_rate)
        )
        await fwdbwd
        await optim


def fetch(url: str) -> bytes:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as reply:
        return reply.read()


# -- the guide's sections 2 and 3 on the whole local stack ------------------------------


async def sail_policy(training_client, service_client, adapter_config, name):
    """The guide's section 2, verbatim."""
    import sail

    save_future = await training_client.save_weights_for_sampler_async(name, ttl_seconds=3600)
    save_result = await save_future
    signed_url = await sail.get_tinker_checkpoint_signed_url_async(
        service_client, save_result.path, ttl_seconds=3600
    )
    return sail.SailTokenCompleter(
        model="moonshotai/Kimi-K2.6",
        max_tokens=1024,
        temperature=1.0,
        completion_window="balanced",
        tinker_lora_signed_url=signed_url,
        adapter_config=adapter_config,
        tinker_lora_name=name,
    )


def greedy(policy):
    """The same served adapter, decoding greedily: a fixed completion to compare logprobs on."""
    import sail

    return sail.SailTokenCompleter(
        model=policy.model,
        max_tokens=16,
        temperature=0.0,
        tinker_lora_signed_url=policy.tinker_lora_signed_url,
        adapter_config=policy.adapter_config,
        tinker_lora_name=policy.tinker_lora_name,
    )


def test_guide_sections_2_and_3_run_on_the_local_stack(local_stack):
    from tinker_cookbook import renderers
    from tinker_cookbook.rl.data_processing import assemble_training_data, compute_advantages
    from tinker_cookbook.rl.rollouts import do_group_rollout
    from tinker_cookbook.rl.train import train_step
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    from helpers.scoring import MathGroupBuilder
    from kimi import register_offline_kimi_tokenizer
    from local_stack.client.dataset import arithmetic_dataset
    from local_stack.client.supervisor import start_local_stack

    start_local_stack()  # the session's stack (conftest); this points the SDKs back at it

    async def main():
        adapter_config = json.load(open(REPO_ROOT / "tinker_adapter_config.json"))
        service_client = tinker.ServiceClient()
        training_client = await service_client.create_lora_training_client_async(
            base_model=MODEL, rank=32
        )
        register_offline_kimi_tokenizer()
        renderer = renderers.get_renderer("kimi_k26", tokenizer=get_tokenizer(MODEL))
        train_rows = list(arithmetic_dataset()["train"])
        group_size, groups_per_step = 4, 16  # the guide's
        probe = renderer.build_generation_prompt([{"role": "user", "content": "What is 3 plus 4?"}])

        probes = []
        for step in range(2):
            policy = await sail_policy(
                training_client, service_client, adapter_config, f"guide-step-{step}"
            )
            probes.append(await greedy(policy)(probe, renderer.get_stop_sequences()))
            rows = random.Random(step).sample(train_rows, groups_per_step)
            builders = [
                MathGroupBuilder(row=r, renderer=renderer, group_size=group_size) for r in rows
            ]
            groups = await asyncio.gather(*(do_group_rollout(b, policy) for b in builders))
            training_groups = [g for g in groups if len(set(g.get_total_rewards())) > 1]
            assert training_groups, "every group was degenerate"
            advantages = compute_advantages(training_groups)
            data, _ = assemble_training_data(training_groups, advantages)
            training_logprobs = await train_step(
                data_D=data,
                training_client=training_client,
                learning_rate=1e-5,
                num_substeps=1,
                loss_fn="importance_sampling",
                metrics={},
            )
            # On-policy: the trainer's logprobs of the sampled tokens are the sampler's.
            for datum, logprobs in zip(data, training_logprobs, strict=True):
                sampled = datum.loss_fn_inputs["mask"].to_torch() > 0
                torch.testing.assert_close(
                    logprobs[sampled],
                    datum.loss_fn_inputs["logprobs"].to_torch()[sampled],
                    rtol=0,
                    atol=1e-4,
                )
        return probes

    before, after = asyncio.run(main())
    # After one optimizer step Sail serves the new adapter: the greedy completion of a
    # fixed prompt (the same tokens, at lr 1e-5) has different logprobs.
    assert before.tokens == after.tokens
    assert not np.allclose(before.maybe_logprobs, after.maybe_logprobs, rtol=0, atol=1e-7)


# -- checkpoints: archives, TTLs, save_state / load_state ------------------------------


def signed_sampler_checkpoint(server, name: str, **url_options) -> tuple[Any, str, str, str]:
    """A new rank-8 run's sampler checkpoint `name`: (service client, model id, path, URL)."""
    import sail

    async def main():
        service_client = server.client()
        training_client = await service_client.create_lora_training_client_async(
            base_model=MODEL, rank=8
        )
        saved = await (await training_client.save_weights_for_sampler_async(name, ttl_seconds=3600))
        url = await sail.get_tinker_checkpoint_signed_url_async(
            service_client, saved.path, **url_options
        )
        return service_client, training_client.model_id, saved.path, url

    return asyncio.run(main())


def test_sampler_checkpoint_archive_is_in_tinkers_own_layout(server):
    """What the cookbook's build_lora_adapter converts from (tests/stack/test_archive_layout.py)."""
    _, model_id, path, url = signed_sampler_checkpoint(server, "s0", ttl_seconds=7200)
    assert path == f"tinker://{model_id}/sampler_weights/s0"
    assert url.startswith(server.url + "/")
    with tarfile.open(fileobj=io.BytesIO(fetch(url))) as tar:
        assert sorted(tar.getnames()) == ["adapter_config.json", "adapter_model.safetensors"]
        config = json.load(tar.extractfile("adapter_config.json"))
        names = safetensors.torch.load(tar.extractfile("adapter_model.safetensors").read()).keys()
    course = json.loads((REPO_ROOT / "tinker_adapter_config.json").read_text())
    assert config == {"lora_alpha": course["lora_alpha"], "r": 8}
    assert "base_model.model.model.unembed_tokens.lora_A.weight" in names
    assert not any("lm_head" in name for name in names)
    expires_at = server.service.store.expires_at(CheckpointRef.from_tinker_path(path))
    assert expires_at == pytest.approx(time.time() + 7200, abs=60)  # the TTL sail set


def test_expired_checkpoint_is_deleted_and_its_url_answers_404(server):
    import sail

    service_client, _, path, url = signed_sampler_checkpoint(server, "e0")
    store = server.service.store
    directory = store.find(CheckpointRef.from_tinker_path(path))
    fetch(url)
    store.clock = lambda: time.time() + 3601
    try:
        with pytest.raises(urllib.error.HTTPError) as raised:
            fetch(url)
        assert raised.value.code == 404
        assert not directory.exists()
        with fails_fast(tinker.NotFoundError):
            asyncio.run(sail.get_tinker_checkpoint_signed_url_async(service_client, path))
    finally:
        store.clock = time.time


def test_save_state_and_load_state_resume_exactly_in_a_new_stack_process(tmp_path):
    """Train, save_state, stop the server; a new server on the same storage resumes."""
    first = start_tinker(tmp_path)
    try:

        async def train_and_save():
            training_client = await first.client().create_lora_training_client_async(
                base_model=MODEL, rank=16
            )
            await train(training_client, steps=2)
            saved = await (await training_client.save_state_async("resume-me"))
            return training_client.model_id, saved.path

        model_id, path = asyncio.run(train_and_save())
        trained = first.service.models[model_id].trainer
        weights = trained.trainable_state()
        steps, moments = trained.optimizer_state()
        moments = {name: moment.clone() for name, moment in moments.items()}
    finally:
        first.stop()

    second = start_tinker(tmp_path)
    try:

        async def resume():
            service_client = second.client()
            weights_only = await service_client.create_lora_training_client_async(
                base_model=MODEL, rank=16
            )
            await (await weights_only.load_state_async(path))
            # The one-call form asks weights_info for the run's rank, then loads.
            resumed = await service_client.create_training_client_from_state_with_optimizer_async(
                path
            )
            return resumed.model_id, weights_only.model_id

        resumed_id, weights_only_id = asyncio.run(resume())
        resumed = second.service.models[resumed_id].trainer
        resumed_steps, resumed_moments = resumed.optimizer_state()
        assert resumed_steps == steps == 2
        for name, tensor in resumed.trainable_state().items():
            assert torch.equal(tensor, weights[name])
        for name, moment in moments.items():
            assert torch.equal(resumed_moments[name], moment)
        weights_only = second.service.models[weights_only_id].trainer
        assert weights_only.optimizer_state()[0] == 0  # load_state restores weights, not Adam
        for name, tensor in weights_only.trainable_state().items():
            assert torch.equal(tensor, weights[name])
    finally:
        second.stop()


# -- errors come back as SDK exceptions, quickly ---------------------------------------


def test_wrong_api_key_is_refused(server):
    client = tinker.ServiceClient(base_url=server.url, api_key="tml-not-the-local-key")
    with fails_fast(tinker.AuthenticationError):
        client.create_lora_training_client(base_model=MODEL, rank=8)


@pytest.mark.parametrize(
    ("base_model", "rank", "match"),
    [("Qwen/Qwen3-8B", 8, "not served"), (MODEL, 0, "rank"), (MODEL, 1000, "rank")],
)
def test_bad_model_requests_are_refused(server, base_model, rank, match):
    with fails_fast(tinker.BadRequestError, match):
        server.client().create_lora_training_client(base_model=base_model, rank=rank)


def test_unknown_model_is_not_found(server):
    service_client = server.client()
    ghost = tinker.TrainingClient(service_client.holder, model_seq_id=7, model_id="ghost:train:0")
    with fails_fast(tinker.NotFoundError, "unknown model_id"):
        ghost.forward_backward([rl_datum()], "importance_sampling").result()


@pytest.fixture(scope="module")
def training_client(server):
    return server.client().create_lora_training_client(base_model=MODEL, rank=8)


def without(datum: types.Datum, key: str) -> types.Datum:
    inputs = {k: v for k, v in datum.loss_fn_inputs.items() if k != key}
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=inputs)


@pytest.mark.parametrize(
    ("data", "loss_fn", "match"),
    [
        ([without(rl_datum(), "advantages")], "importance_sampling", "takes loss_fn_inputs"),
        ([rl_datum(), rl_datum(n_prompt=300)], "importance_sampling", "datum 1: model_input"),
        ([rl_datum()], "cross_entropy", "takes loss_fn_inputs"),
        ([rl_datum()], "dro", "not available locally"),
    ],
)
def test_malformed_requests_are_refused_and_the_model_keeps_working(
    training_client, data, loss_fn, match
):
    with fails_fast(tinker.BadRequestError, match):
        training_client.forward_backward(data, loss_fn).result()
    # The refused request used up its seq_id; the next ones run at once.
    # (A seq_id left unused would make them wait for it: the bound fails that hang.)
    step = training_client.forward_backward([rl_datum()], "importance_sampling")
    result = step.result(timeout=HANG_SECONDS)
    training_client.optim_step(types.AdamParams(learning_rate=1e-4)).result(timeout=HANG_SECONDS)
    assert result.loss_fn_outputs[0]["logprobs"].shape == [10]
    assert "loss:sum" in result.metrics


def test_unknown_checkpoints_are_not_found(training_client, server):
    ghost = f"tinker://{training_client.model_id}/weights/never-saved"
    with fails_fast(tinker.NotFoundError, "not found"):
        training_client.load_state(ghost).result()
    rest = server.client().create_rest_client()
    with fails_fast(tinker.NotFoundError):
        rest.get_checkpoint_archive_url_from_tinker_path(
            ghost.replace("/weights/", "/sampler_weights/")
        ).result()
    with fails_fast(tinker.BadRequestError, "ttl_seconds"):
        training_client.save_weights_for_sampler("short", ttl_seconds=60).result()
    saved = training_client.save_weights_for_sampler("sampler-only").result()
    with fails_fast(tinker.BadRequestError, "save_state path"):
        training_client.load_state(saved.path).result()


# -- ordering ------------------------------------------------------------------------


def test_requests_run_in_seq_id_order_and_gaps_do_not_stall(monkeypatch):
    monkeypatch.setattr(futures, "SEQ_GAP_SECONDS", 0.2)

    async def main():
        sequencer, ran = RequestSequencer(), []

        def job(seq_id):
            async def run():
                ran.append(seq_id)

            return run

        for seq_id in (3, 1, 2):  # chunks of one forward_backward may overtake each other
            sequencer.submit(sequencer.claim(seq_id), job(seq_id))
        sequencer.submit(sequencer.claim(5), job(5))  # seq 4 never arrives
        await asyncio.sleep(0.5)
        with pytest.raises(ValueError, match="already used"):
            sequencer.claim(2)
        sequencer.close()
        return ran

    assert asyncio.run(main()) == [1, 2, 3, 5]
