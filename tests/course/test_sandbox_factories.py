"""The course's sandbox factories: a Sailbox with no network in the cloud, the local sandbox
locally, chosen by backend. Sail is not reachable from here, so the cloud factory runs the
real SDK down to its wire-level create call, which records the request instead of sending it.
"""

from __future__ import annotations

import functools
import json
import pickle
import subprocess
import sys
from typing import Any

import pytest
import sail
import sail.app
import sail.image
from sandbox_probes import ENV_DIR, run

from shell_tasks.sandboxes import local_task_sandbox, sailbox_factory, sandbox_factory

FAKE_KEYS = {"TINKER_API_KEY": "tml-fake-factory-key", "SAIL_API_KEY": "sk_fake_factory_key"}


@pytest.fixture
def sail_creates(monkeypatch) -> list[dict[str, Any]]:
    """Every Sailbox create request the SDK would send, with Sail's side of it stubbed."""
    requests: list[dict[str, Any]] = []

    async def find_app(name: str, *, mint_if_missing: bool = False) -> dict[str, Any]:
        return {"id": f"app-{name}", "name": name, "created_at": "2026-11-30T00:00:00Z"}

    async def create_sailbox(**request: Any) -> dict[str, Any]:
        requests.append(request)
        return {"sailbox_id": f"sb-{len(requests)}", "name": request["name"], "status": "running"}

    async def already_built(image: Any, timeout: float) -> Any:
        return image  # a registry image is resolved by Sail, which is not here

    monkeypatch.setattr(sail.app, "_find_app_aio", find_app)
    monkeypatch.setattr(sail.sailbox._core_client, "create_sailbox_aio", create_sailbox)
    monkeypatch.setattr(sail.image.ImageDefinition, "_ensure_built_aio", already_built)
    return requests


def _policy(request: dict[str, Any]) -> Any:
    document = request["egress_policy_document"]
    return None if document is None else json.loads(document)


def test_the_course_factory_creates_sailboxes_with_no_network(sail_creates) -> None:
    sandbox = run(sailbox_factory(ENV_DIR, 600))
    assert isinstance(sandbox, sail.TinkerSandbox) and sandbox.sandbox_id == "sb-1"
    (request,) = sail_creates
    assert _policy(request) == sail.EgressPolicy.no_network() == {"no_network": True}
    assert request["max_lifetime_seconds"] == 600  # Sail ends it even if this process dies
    assert request["size"] == "s" and request["app_id"] == "app-tinker"
    assert request["name"].startswith("tinker-environment-")


def test_allowed_hosts_open_only_those(sail_creates) -> None:
    run(sailbox_factory(ENV_DIR, 60, allowed_hosts=("pypi.org", "files.pythonhosted.org")))
    assert _policy(sail_creates[0]) == {"allowlist": ["pypi.org", "files.pythonhosted.org"]}


def test_the_guides_factory_asks_for_no_policy_so_the_sailbox_reaches_every_host(
    sail_creates,
) -> None:
    """Why the course does not use `sail.tinker_sandbox_factory` as it is."""
    run(sail.tinker_sandbox_factory(ENV_DIR, 600, size="s"))
    assert _policy(sail_creates[0]) is None
    assert sail.EgressPolicy.allow_all() == {}  # what a Sailbox without a policy runs under


def test_the_course_factory_survives_pickling(sail_creates) -> None:
    factory = functools.partial(sailbox_factory, size="s", allowed_hosts=("pypi.org",))
    restored = pickle.loads(pickle.dumps(factory))
    assert restored.func is sailbox_factory and restored.keywords == factory.keywords
    run(restored(ENV_DIR, 60))
    assert _policy(sail_creates[0]) == {"allowlist": ["pypi.org"]}


def test_the_backend_chooses_the_factory(monkeypatch) -> None:
    for name, value in FAKE_KEYS.items():
        monkeypatch.setenv(name, value)
    cloud = sandbox_factory("cloud")
    assert (cloud.func, cloud.keywords) == (sailbox_factory, {"size": "s"})
    local = sandbox_factory("local", simulated_boot_seconds=0.5)
    assert local.func is local_task_sandbox
    assert local.keywords == {"startup_latency_seconds": 0.5}
    for factory in (cloud, local):
        assert pickle.loads(pickle.dumps(factory)).keywords == factory.keywords
    with pytest.raises(Exception, match="backend must be one of"):
        sandbox_factory("laptop")


def test_the_cloud_factory_never_loads_the_local_stack() -> None:
    check = (
        f"import os, sys; os.environ.update({FAKE_KEYS!r});"
        "from shell_tasks.sandboxes import sandbox_factory; sandbox_factory('cloud');"
        "from shell_tasks.sandbox_cells import prepare_sandbox_cells;"
        "prepare_sandbox_cells('cloud');"
        "print(sorted(m for m in sys.modules if m.startswith('local_stack')))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120, check=True
    )
    assert loaded.stdout.strip() == "[]"
