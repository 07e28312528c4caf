"""What the isolation tests share: clients with keys of their own, and the bystander check.

Every attack in these tests comes from one client; `assert_bystander_served` then checks that
another client, with its own keys, is still served: a sampling answer within
BYSTANDER_ANSWER_SECONDS and `/healthz` within HEALTH_SECONDS. Both bounds are timeouts of the
bystander's own requests, so a stack that stalls fails the request; no duration is asserted.
"""

from __future__ import annotations

import secrets

import tinker
import urllib3

from local_stack.config import client_keys
from tests.sail_support import HTTP, create_body

BYSTANDER_ANSWER_SECONDS = 5.0
HEALTH_SECONDS = 1.0


def new_client(role: str) -> str:
    """A fresh client name: `role` and random hex, so no two tests share a client."""
    return f"{role}{secrets.token_hex(4)}"


def sail_headers(client: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {client_keys(client)['SAIL_API_KEY']}"}


def tinker_headers(client: str) -> dict[str, str]:
    return {"X-API-Key": client_keys(client)["TINKER_API_KEY"]}


def tinker_service(url: str, client: str) -> tinker.ServiceClient:
    return tinker.ServiceClient(base_url=url, api_key=client_keys(client)["TINKER_API_KEY"])


def sail(url: str, client: str, method: str, path: str, **kwargs) -> urllib3.BaseHTTPResponse:
    """A raw Sail request (`path` under /v1) with `client`'s key."""
    return HTTP.request(method, f"{url}/v1{path}", headers=sail_headers(client), **kwargs)


def sample_from_lora(
    url: str, client: str, lora: dict[str, str], **body
) -> urllib3.BaseHTTPResponse:
    """`client`'s raw `/responses` request (a small `create_body`, changed by `body`) that
    samples from the adapter `lora` names: the request metadata's `lora`, and maybe its
    `tinker_adapter_config`."""
    metadata = {"completion_window": "balanced", **lora}
    return sail(url, client, "POST", "/responses", json=create_body(metadata=metadata, **body))


def tinker_json(url: str, client: str, path: str, body: dict) -> urllib3.BaseHTTPResponse:
    """A raw Tinker JSON POST (`path` under /api/v1) with `client`'s key."""
    return HTTP.request("POST", f"{url}/api/v1{path}", json=body, headers=tinker_headers(client))


def assert_bystander_served(url: str) -> None:
    """A client that has nothing to do with the attack samples four tokens and reads
    `/healthz`, each under its timeout."""
    health = HTTP.request("GET", f"{url}/healthz", timeout=urllib3.Timeout(total=HEALTH_SECONDS))
    assert health.status == 200 and health.json()["ok"]
    reply = HTTP.request(
        "POST",
        f"{url}/v1/responses",
        json=create_body(background=False, max_output_tokens=4),
        headers=sail_headers(new_client("bystander")),
        timeout=urllib3.Timeout(total=BYSTANDER_ANSWER_SECONDS),
    )
    assert reply.status == 200, reply.data[:300]
    body = reply.json()
    assert body["status"] in ("completed", "incomplete") and body["output"], body
