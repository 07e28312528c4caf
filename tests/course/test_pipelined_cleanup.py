"""Notebook 07's pipelined loop deletes every sampler checkpoint it writes, each once no batch
samples from it any more, as notebook 04's loop does: on success and when a step fails.

The loop's own code runs; its four calls to the services are replaced by stand-ins that
record what was written, deleted and sampled, and a batch checks, when its sampling ends,
that the checkpoint it samples from still exists.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

import helpers.pipelined as pipelined


class Services:
    def __init__(self, fail_at_step: int | None = None) -> None:
        self.live: set[str] = set()
        self.written: list[str] = []
        self.deleted: list[str] = []
        self.fail_at_step = fail_at_step

    async def snapshot_policy(self, name, settings, training_client, course, run_id):
        self.live.add(name)
        self.written.append(name)
        return SimpleNamespace(checkpoint_path=name)

    async def sample_batch(self, step, sampled_at, policy, rows, course, settings, timeline):
        await asyncio.sleep(0.001 * (3 - step % 3))  # batches finish out of order
        assert policy.checkpoint_path in self.live, f"batch {step} lost its checkpoint"
        return pipelined.Batch(step, sampled_at, [], 0)

    async def train_on_batch(self, batch, training_client, settings, timeline):
        if batch.step == self.fail_at_step:
            raise RuntimeError("Tinker went away")
        return {"step": batch.step}

    async def delete_checkpoint(self, service_client, path):
        self.live.remove(path)
        self.deleted.append(path)


def run(services: Services, monkeypatch, steps: int, staleness: int) -> list[dict]:
    for name in ("snapshot_policy", "sample_batch", "train_on_batch", "delete_checkpoint"):
        monkeypatch.setattr(pipelined, name, getattr(services, name))
    settings = SimpleNamespace(run_name="run")
    course = SimpleNamespace(service_client=None)
    return asyncio.run(
        pipelined.run_loop(
            None, course, settings, lambda step: [], steps, staleness, pipelined.Timeline()
        )
    )


@pytest.mark.parametrize("staleness", [0, 1, 2, 3])
def test_every_snapshot_is_deleted_once_after_its_last_batch(staleness: int, monkeypatch) -> None:
    services = Services()
    records = run(services, monkeypatch, 6, staleness)
    assert [r["step"] for r in records] == list(range(6))
    assert sorted(services.deleted) == sorted(services.written) and not services.live
    assert len(services.written) == 6


def test_a_failed_step_still_deletes_what_it_wrote(monkeypatch) -> None:
    services = Services(fail_at_step=2)
    with pytest.raises(RuntimeError, match="Tinker went away"):
        run(services, monkeypatch, 6, 2)
    assert services.written and not services.live
