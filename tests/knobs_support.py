"""Reading the stack's per-client settings, for the tests that check whose they are."""

from __future__ import annotations

import json
import urllib.request

from local_stack import config
from local_stack.control.knobs import Knobs

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def stack_default() -> dict:
    """The settings every client gets unless it set its own: the stack's start-up ones."""
    return Knobs.from_settings(config.knob_settings_from_env()).as_dict()


def config_of(url: str, client: str) -> dict:
    """What `client`'s requests get, asked with its own key."""
    request = urllib.request.Request(
        f"{url}/local/config",
        headers={"Authorization": f"Bearer {config.SAIL_KEY_PREFIX}{client}"},
    )
    with NO_PROXY.open(request, timeout=30) as reply:
        return json.load(reply)
