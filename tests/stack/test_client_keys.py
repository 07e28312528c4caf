"""Keys name clients: every process that connects gets its own, and the stack knows which
client sent each request (what ownership, per-client settings and fair queues build on)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import urllib3

from local_stack import config

HTTP = urllib3.PoolManager(retries=False)


def test_a_key_names_its_client_and_a_foreign_key_names_none():
    keys = config.client_keys("ab12")
    assert keys == {"TINKER_API_KEY": "tml-local-ab12", "SAIL_API_KEY": "sk_local_ab12"}
    assert config.client_from_key(keys["TINKER_API_KEY"], config.TINKER_KEY_PREFIX) == "ab12"
    assert config.client_from_key(keys["SAIL_API_KEY"], config.SAIL_KEY_PREFIX) == "ab12"
    for foreign in ("tml-local-", "tml-local-AB", "tml-local-a/b", "tml-real-key", "", "x" * 99):
        assert config.client_from_key(foreign, config.TINKER_KEY_PREFIX) is None
    with pytest.raises(ValueError, match="1-32 lowercase letters or digits"):
        config.client_keys("../etc")


def test_each_process_gets_its_own_client_for_its_whole_life():
    assert config.process_client() == config.process_client()
    other = subprocess.run(
        [sys.executable, "-c", "from local_stack import config; print(config.process_client())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert config.CLIENT_NAME.fullmatch(other)
    assert other != config.process_client()


@pytest.mark.parametrize(
    ("path", "header", "prefix"),
    [
        ("/v1/files", "Authorization", "Bearer sk_local_"),
        ("/local/config", "Authorization", "Bearer sk_local_"),
    ],
)
def test_the_stack_accepts_any_client_key_and_refuses_other_keys(local_stack, path, header, prefix):
    for client in ("stack", "k3rnel0001"):
        reply = HTTP.request("GET", local_stack.url + path, headers={header: prefix + client})
        assert reply.status == 200, reply.data
    for bad in (prefix, prefix + "UPPER", "Bearer tml-local-stack", ""):
        reply = HTTP.request("GET", local_stack.url + path, headers={header: bad})
        assert reply.status == 401, (bad, reply.data)
        assert b"<client>" in reply.data
