"""Which login each SDK will use on the cloud backend, found by the SDKs' own rules.

Tinker (`tinker/lib/_auth_token_provider.py`, `resolve_auth_provider`): `TINKER_API_KEY`
(a `tml-` key, or a JWT starting `eyJ`), else the command in `TINKER_CREDENTIAL_CMD`, else
the default key stored by `tinker auth login` (`~/.tinker/credentials.json`). Sail
(`sail/_config.py`): `SAIL_API_KEY` (or the variable of the selected `SAIL_MODE`), else the
key stored by `sail auth login` under `~/.sail`. Each function names the login it found,
never the secret; nothing here runs a credential command or calls a service.
"""

from __future__ import annotations

import os

import sail
from sail import _core as sail_core
from tinker import TinkerError
from tinker.auth import get_tinker_token
from tinker.lib._auth_token_provider import CredentialCmdAuthProvider, resolve_auth_provider

from helpers.errors import CourseConfigError


def tinker_login() -> str:
    """The Tinker login the SDK will use, described; CourseConfigError if there is none."""
    try:
        provider = resolve_auth_provider(api_key=None, enforce_cmd=False)
    except (TinkerError, OSError, ValueError) as error:
        raise CourseConfigError(
            f"backend='cloud' found no usable Tinker login ({_one_line(error)}); "
            "or use backend='local'."
        ) from None
    if isinstance(provider, CredentialCmdAuthProvider):
        return "the command in TINKER_CREDENTIAL_CMD (run whenever Tinker needs a credential)"
    key = get_tinker_token() or ""  # the same key: TINKER_API_KEY's, else the stored one
    form = "a JWT" if key.startswith("eyJ") else "a tml- key"
    if os.environ.get("TINKER_API_KEY") == key:
        return f"TINKER_API_KEY ({form})"
    return f"the login stored by `tinker auth login` ({form})"


def sail_login() -> str:
    """The Sail login the SDK will use, described; CourseConfigError if there is none."""
    try:
        sail.Config.from_env()
        variable = sail_core.resolved_config()["api_key_env_var"]
    except (sail.SailError, ValueError) as error:
        raise CourseConfigError(
            f"backend='cloud' found no usable Sail login ({_one_line(error)}); "
            "or use backend='local'."
        ) from None
    if (os.environ.get(variable) or "").strip():
        return variable
    return "the login stored by `sail auth login`"


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()).rstrip(".")
