"""`metadata.lora` may name only the stack's own adapter archive route.

Before, any loopback URL was fetched and its HTTP status echoed back: a request could make the
stack call any port or route on the machine. Now every other URL is refused with a 400 and
one sentence, and nothing is fetched: a loopback server counts the requests it gets.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from tests import sail_support as support
from tests.isolation_support import assert_bystander_served, new_client, sample_from_lora

REFUSAL = "metadata.lora must be an adapter archive URL of this stack's Tinker"


@pytest.fixture(scope="module")
def decoy(local_stack):
    """A loopback server that answers anything with an archive, and counts what it got."""
    hits: list[str] = []

    def answer(handler) -> None:
        hits.append(handler.path)
        handler.send_response(200)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    routes = {
        path: answer
        for path in ("/a.tar", "/tinker/archives/run/sampler_weights/name.tar", "/redirect")
    }
    with support.file_server(routes) as url:
        yield url, hits


def _off_route_urls(stack: str, decoy: str) -> list[str]:
    port = urlsplit(stack).port
    own = "/tinker/archives/run/sampler_weights/name.tar"
    return [
        f"{decoy}/a.tar",  # another loopback port
        f"{decoy}{own}",  # the archive route's shape, on another port
        f"{stack}/healthz",  # the stack's own port, other routes
        f"{stack}/v1/files",
        f"{stack}/local/config",
        f"{stack}/api/v1/get_server_capabilities",
        f"{stack}/tinker/archives/../../v1/files",
        f"{stack}/tinker/archives/run/sampler_weights/%2e%2e.tar",
        f"{stack}/tinker/archives/run/other_kind/name.tar",
        f"{stack}/tinker/archives/run/sampler_weights/name.tar/extra",
        f"{stack}{own}#fragment",
        f"http://localhost:{port}{own}",  # another name for the host: could be another server
        f"http://user@127.0.0.1:{port}{own}",
        f"https://127.0.0.1:{port}{own}",
        f"http://[::1]:{port}{own}",
        f"https://example.com{own}",
        "file:///etc/passwd",
    ]


def test_urls_off_the_archive_route_are_refused_without_fetching(local_stack, decoy):
    decoy_url, hits = decoy
    mallory = new_client("mallory")
    for lora_url in _off_route_urls(local_stack.url, decoy_url):
        reply = sample_from_lora(local_stack.url, mallory, {"lora": lora_url})
        assert reply.status == 400, (lora_url, reply.data[:300])
        error = reply.json()["error"]
        assert error["param"] == "metadata.lora" and REFUSAL in error["message"], (lora_url, error)
        assert error["message"].count(". ") == 0
    assert_bystander_served(local_stack.url)
    assert hits == []


def test_the_archive_route_is_fetched(local_stack):
    """A URL of the archive route is fetched: a checkpoint that is not there is a 404 from
    the route, which Sail reports."""
    missing = f"{local_stack.url}/tinker/archives/nobody/sampler_weights/none.tar?sig=1"
    reply = sample_from_lora(local_stack.url, new_client("alice"), {"lora": missing})
    assert reply.status == 400 and "gave HTTP 404" in reply.json()["error"]["message"]
