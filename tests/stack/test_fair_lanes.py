"""Made-up client names buy no extra share: every name no process registered takes one
shared lane, for turns, quotas and settings alike."""

from __future__ import annotations

import asyncio
import os

from bench import fairness
from local_stack import registry
from local_stack.control.knobs import MAX_CLIENTS_WITH_SETTINGS, ClientKnobs, Knobs
from local_stack.lanes import REFRESH_SECONDS, SHARED_LANE, Lanes
from local_stack.sail.requests import parse_sampling_request
from local_stack.sail.service import SailService
from tests.sail_support import create_body
from tests.stack.test_fair_stack import HEALTHZ_TIMEOUT_SECONDS, INNOCENT_TIMEOUT_SECONDS


def test_a_registered_name_has_its_own_lane_and_made_up_names_share_one(tmp_path) -> None:
    now = [0.0]
    lanes = Lanes.following(tmp_path)
    lanes._clock = lambda: now[0]
    registry.add_client(tmp_path, os.getpid(), "kernel")
    assert lanes.of("kernel") == "kernel"
    assert lanes.of("madeupa") == lanes.of("madeupb") == SHARED_LANE
    registry.add_client(tmp_path, os.getppid(), "latecomer")
    assert lanes.of("latecomer") == SHARED_LANE  # the registry was read under a second ago
    now[0] += REFRESH_SECONDS
    assert lanes.of("latecomer") == "latecomer"


def test_without_a_registry_every_name_is_its_own_lane() -> None:
    assert Lanes().of("madeupa") == "madeupa"


def test_64_made_up_names_get_one_names_share_of_the_batcher() -> None:
    """64 made-up names queue two requests each, then a registered client one: it is sampled
    in the second batch (after the made-up names' one), not the 129th."""

    async def main() -> int:
        service = SailService(ClientKnobs(Knobs()), Lanes(lambda: {"innocent"}))
        body = create_body(max_output_tokens=2)

        async def create(client: str):
            request = parse_sampling_request(
                body, service.vocabs, client=client, archive_prefix=None
            )
            return await service.create(request, client)

        for _ in range(2):
            for i in range(64):
                await create(f"madeup{i}")
        innocent = await create("innocent")
        await asyncio.wait_for(innocent.job.done, 120)
        batches = service.batcher.stats["batches"]
        await service.close()
        return batches

    assert asyncio.run(main()) <= 2


def test_a_flood_of_made_up_names_cannot_evict_a_registered_clients_settings() -> None:
    knobs = ClientKnobs(Knobs(), kept=Lanes(lambda: {"kernel"}).is_registered)
    knobs.update("kernel", {"latency": 3.0})
    for number in range(MAX_CLIENTS_WITH_SETTINGS + 6):
        knobs.update(f"madeup{number}", {"latency": 1.0})
    assert knobs.of("kernel").latency == 3.0
    assert knobs.of("madeup0").latency == 0.0  # the oldest made-up names' settings went
    assert knobs.of(f"madeup{number}").latency == 1.0


def test_a_flood_over_64_made_up_names_does_not_starve_a_registered_client(local_stack) -> None:
    asyncio.run(
        fairness.attack_made_up_names(
            local_stack.url, 64, 32, INNOCENT_TIMEOUT_SECONDS, HEALTHZ_TIMEOUT_SECONDS
        )
    )
