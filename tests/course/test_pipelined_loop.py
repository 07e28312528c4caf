"""Notebook 07's pipelined loop (helpers/pipelined.py), in-process: how stale a batch may be,
which snapshot samples which batch, how many batches sample at once, and what a step records.

Sail and Tinker are replaced at the loop's seams (`snapshot_policy`, `rollout_groups`, and
the cookbook's `train_step`); everything between them is the course's own code.
"""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import pytest
import torch

import helpers.pipelined as pipelined
import helpers.training as training
from helpers.pipelined import Timeline, predicted_seconds_per_step, run_loop
from helpers.training import LoopSettings
from tests.rl_groups_support import group, rollout

SETTINGS = LoopSettings(
    run_name="pipe",
    group_size=2,
    learning_rate=1e-4,
    max_tokens=8,
    temperature=1.0,
    completion_window="priority",
)
COURSE = SimpleNamespace(renderer=None, service_client="service")  # the fakes only pass it on
SHIFT = 0.25  # the learner's logprob of every sampled token, above the sampler's


class Snapshot(str):
    """A snapshot's name, which the loop also deletes by (as a checkpoint path)."""

    @property
    def checkpoint_path(self) -> str:
        return str(self)


class FakeServices:
    """Stands in for Sail and Tinker: snapshots are named, rollouts remember their policy."""

    def __init__(
        self, monkeypatch, degenerate_steps=(), fail_training_at=None, hang_from=None
    ) -> None:
        self.snapshots: list[str] = []
        self.sampled: dict[int, str] = {}  # batch (its rows' step) -> snapshot that sampled it
        self.running = 0
        self.most_running = 0
        self.cancelled: list[int] = []
        self.trained: list[list] = []
        self.degenerate_steps = set(degenerate_steps)
        self.fail_training_at = fail_training_at
        self.hang_from = hang_from  # batches from this step on never finish sampling
        monkeypatch.setattr(pipelined, "snapshot_policy", self.snapshot_policy)
        monkeypatch.setattr(pipelined, "rollout_groups", self.rollout_groups)
        monkeypatch.setattr(training, "train_step", self.train_step)
        monkeypatch.setattr(pipelined, "delete_checkpoint", self.delete_checkpoint)
        self.deleted: list[str] = []
        self.run_ids: list[str] = []
        self.alive: list[int] = []  # snapshots not yet deleted, as each new one is taken
        self.fail_deletes = False

    async def snapshot_policy(self, name, settings, training_client, course, run_id):
        assert settings is SETTINGS and training_client == "client" and course is COURSE
        self.alive.append(len(self.snapshots) - len(self.deleted))
        self.snapshots.append(name)
        self.run_ids.append(run_id)
        return Snapshot(name)

    async def delete_checkpoint(self, service_client, path):
        assert service_client == "service"
        if self.fail_deletes:
            raise RuntimeError("Tinker cannot delete now")
        self.deleted.append(path)

    async def rollout_groups(self, builders, policy):
        step = builders[0].row["step"]
        self.sampled[step] = policy
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        try:
            for _ in range(3):  # take a few turns of the event loop, as sampling does
                await asyncio.sleep(0)
            if self.hang_from is not None and step >= self.hang_from:
                await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(step)
            raise
        finally:
            self.running -= 1
        if step in self.degenerate_steps:
            return [group(rollout(0.0), rollout(0.0))], 1
        return [group(rollout(1.0, correct=1.0), rollout(0.0, logprobs=(-2.0, -0.5)))], step

    async def train_step(self, *, data_D, training_client, learning_rate, **kwargs):
        assert training_client == "client" and learning_rate == SETTINGS.learning_rate
        if self.fail_training_at is not None and len(self.trained) == self.fail_training_at:
            raise RuntimeError("Tinker went away")
        self.trained.append(data_D)
        return [d.loss_fn_inputs["logprobs"].to_torch() + SHIFT for d in data_D]


ROWS_ASKED: list[int] = []  # the steps whose rows the loop asked for, in order


def rows_for_step(step: int) -> list[dict]:
    ROWS_ASKED.append(step)
    return [{"question": f"q{step}", "answer": "1", "step": step}]


def loop(steps: int, max_staleness: int) -> list[dict]:
    return asyncio.run(
        run_loop("client", COURSE, SETTINGS, rows_for_step, steps, max_staleness, Timeline())
    )


@pytest.mark.parametrize(
    ("max_staleness", "staleness"),
    [
        (0, [0, 0, 0, 0, 0, 0]),
        (1, [0, 1, 1, 1, 1, 1]),
        (2, [0, 1, 2, 2, 2, 2]),
        (3, [0, 1, 2, 3, 3, 3]),
        (6, [0, 1, 2, 3, 4, 5]),
    ],
)
def test_a_batch_is_at_most_max_staleness_steps_old(monkeypatch, max_staleness, staleness):
    fake = FakeServices(monkeypatch)
    ROWS_ASKED.clear()
    records = loop(6, max_staleness)
    assert ROWS_ASKED == list(range(6))  # each step's rows once, none past the last step
    assert [r["step"] for r in records] == list(range(6))
    assert [r["staleness"] for r in records] == staleness
    # Step t snapshots once, as `<run_name>-step-t`; each batch sampled from the snapshot of
    # the step it records as `sampled_at`, never from a later one.
    assert fake.snapshots == [f"pipe-step-{t}" for t in range(6)]
    assert fake.sampled == {t: f"pipe-step-{t - s}" for t, s in enumerate(staleness)}
    # Never more than k batches sampling at once (one for the synchronous loop).
    assert fake.most_running == max(1, min(max_staleness, 6))
    assert len(fake.trained) == 6 and not fake.cancelled


def test_a_step_records_its_batch_and_how_far_the_learner_moved(monkeypatch):
    FakeServices(monkeypatch, degenerate_steps={1})
    records = loop(3, 1)
    first, skipped, last = records
    assert first["reward"] == 0.5 and first["datums"] == 2 and first["dropped_rollouts"] == 0
    assert last["dropped_rollouts"] == 2
    # The learner is SHIFT above the sampler on every sampled token.
    assert first["kl"] == pytest.approx(SHIFT**2 / 2)
    assert first["weight_max"] == pytest.approx(math.exp(SHIFT))
    assert first["weight_std"] == pytest.approx(0.0, abs=1e-6)
    # Step 1's groups all got one reward: nothing to learn, so it does not train.
    assert skipped["datums"] == 0 and skipped["reward"] == 0.0 and skipped["dropped_rollouts"] == 1
    assert all(math.isnan(skipped[key]) for key in ("kl", "weight_std", "weight_max"))
    assert skipped["staleness"] == 1


def test_a_failed_step_cancels_the_batches_still_sampling(monkeypatch):
    fake = FakeServices(monkeypatch, fail_training_at=1, hang_from=2)

    async def fail_and_look() -> list[asyncio.Task]:
        with pytest.raises(RuntimeError, match="Tinker went away"):
            await run_loop("client", COURSE, SETTINGS, rows_for_step, 6, 3, Timeline())
        await asyncio.sleep(0)  # let the cancellations land
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]

    assert asyncio.run(fail_and_look()) == []
    assert fake.cancelled == [2] and fake.running == 0  # 3 and 4 never started sampling


def test_the_timeline_records_each_part_of_each_step(monkeypatch):
    FakeServices(monkeypatch)
    timeline = Timeline()
    asyncio.run(run_loop("client", COURSE, SETTINGS, rows_for_step, 4, 2, timeline))
    for what in ("snapshot", "sample", "train"):
        spans = timeline.seconds(what)
        assert sorted(spans) == [0, 1, 2, 3] and all(s >= 0 for s in spans.values())
    assert timeline.sample_seconds() >= 0 and timeline.tinker_seconds() >= 0
    assert timeline.seconds_per_step(2) >= 0


def test_the_timeline_medians_and_windows():
    timeline = Timeline(origin=0.0)
    ends = [1.0, 2.0, 4.0, 5.0, 9.0]
    for step, end in enumerate(ends):
        timeline.spans += [
            ("snapshot", step, end - 1.0, end - 0.9),
            ("sample", step, end - 3.0, end - 3.0 + step),
            ("train", step, end - 0.5, end),
        ]
    assert timeline.seconds("sample") == dict(enumerate([0.0, 1.0, 2.0, 3.0, 4.0]))
    assert timeline.sample_seconds() == 2.0
    assert timeline.tinker_seconds() == pytest.approx(0.6)
    assert timeline.seconds_per_step() == 1.5  # median of 1, 2, 1, 4
    assert timeline.seconds_per_step(2) == 1.5  # median of 1.5, 1.5, 2.5
    assert timeline.seconds_per_step(9) == 2.0  # at most all the steps after the first


@pytest.mark.parametrize(("k", "expected"), [(0, 13.0), (1, 10.0), (2, 5.0), (5, 3.0), (10, 3.0)])
def test_predicted_seconds_per_step(k, expected):
    assert predicted_seconds_per_step(k, sample_s=10.0, tinker_s=3.0) == expected


def test_off_policy_metrics_read_only_the_sampled_tokens(monkeypatch):
    fake = FakeServices(monkeypatch)
    loop(1, 0)
    data = fake.trained[0]
    learner = [torch.zeros_like(d.loss_fn_inputs["logprobs"].to_torch()) for d in data]
    metrics = pipelined.off_policy_metrics(data, learner)
    # The sampled tokens' logprobs are -1, -1 (first rollout) and -2, -0.5 (second): the
    # prompt's positions (mask 0) would add weights of exp(0) = 1 if they were counted.
    weights = torch.exp(torch.tensor([1.0, 1.0, 2.0, 0.5]))
    assert metrics["weight_max"] == pytest.approx(math.exp(2.0))
    assert metrics["weight_std"] == pytest.approx(weights.std().item())
    assert metrics["kl"] == pytest.approx(
        float((torch.tensor([1.0, 1.0, 2.0, 0.5]) ** 2).mean() / 2)
    )


def test_every_snapshot_is_deleted_once_and_each_loop_is_a_new_run(monkeypatch):
    fake = FakeServices(monkeypatch)
    loop(4, 0)
    assert fake.alive == [0, 1, 1, 1]  # a step's snapshot goes once its batch is sampled
    assert sorted(fake.deleted) == sorted(fake.snapshots)  # the last one too, once done
    loop(2, 0)
    first, second = fake.run_ids[:4], fake.run_ids[4:]
    assert len(set(first)) == len(set(second)) == 1 and None not in fake.run_ids
    assert first[0] != second[0]  # a new run id: Sail never sees one LoRA name twice


def test_one_step_ahead_is_the_schedule_of_max_staleness_1_only(monkeypatch):
    FakeServices(monkeypatch)
    used: list[int] = []

    async def one_step_ahead(steps, sample, train):
        used.append(steps)
        return await pipelined.k_steps_ahead(steps, sample, train, k=1)

    for max_staleness, steps in ((0, 2), (1, 3), (2, 4)):
        asyncio.run(
            run_loop(
                "client",
                COURSE,
                SETTINGS,
                rows_for_step,
                steps,
                max_staleness,
                Timeline(),
                one_step_ahead,
            )
        )
    assert used == [3]


def test_a_failed_step_is_what_the_loop_raises_even_if_cleaning_up_fails(monkeypatch):
    fake = FakeServices(monkeypatch, fail_training_at=0)
    fake.fail_deletes = True
    with pytest.raises(RuntimeError, match="Tinker went away"):
        loop(3, 1)
