"""The backend seam refuses bad settings in one sentence, before any remote call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.errors import CourseConfigError
from helpers.params import check_backend

FAKE_TINKER_KEY = "tml-fake-key-for-tests-0123456789"
FAKE_SAIL_KEY = "sk_fake_key_for_tests"


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No key in the environment, no credential command, and a home with no stored login.
    Sail's endpoint is its default too: with SAIL_API_URL pointing elsewhere (the local
    stack's), the SDK does not use a stored login (observed with sail 0.17.1)."""
    for variable in (
        "TINKER_API_KEY",
        "TINKER_CREDENTIAL_CMD",
        "SAIL_API_KEY",
        "SAIL_API_URL",
        "SAILBOX_API_URL",
        "SAIL_MODE",
        "SAIL_HOME",
        "HF_TOKEN",
    ):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    return monkeypatch


def store_tinker_login(home: Path, key: str) -> None:
    """What `tinker auth login` writes (tinker/lib/credentials.py, StoredCredentialsV1)."""
    record = {"type": "manual", "key": key, "name": "laptop"}
    stored = {"version": 1, "default": "laptop", "keys": {"laptop": record}}
    (home / ".tinker").mkdir(parents=True)
    (home / ".tinker" / "credentials.json").write_text(json.dumps(stored))


def store_sail_login(home: Path, key: str) -> None:
    """What `sail auth login` leaves under ~/.sail: the SDK reads `auth.toml`'s key once
    `config.toml` exists (observed with sail 0.17.1's core)."""
    (home / ".sail").mkdir(parents=True)
    (home / ".sail" / "config.toml").write_text('mode = "prod"\n')
    (home / ".sail" / "auth.toml").write_text(f'api_key = "{key}"\n')


def test_unknown_backend_names_the_allowed_values() -> None:
    with pytest.raises(CourseConfigError, match=r"^backend must be one of 'local', 'cloud'"):
        check_backend("nonsense")


def test_local_needs_nothing(no_keys: pytest.MonkeyPatch) -> None:
    check_backend("local")


@pytest.mark.parametrize("missing", ["TINKER_API_KEY", "SAIL_API_KEY"])
def test_cloud_names_the_missing_variable(no_keys: pytest.MonkeyPatch, missing: str) -> None:
    no_keys.setenv("TINKER_API_KEY", FAKE_TINKER_KEY)
    no_keys.setenv("SAIL_API_KEY", FAKE_SAIL_KEY)
    no_keys.delenv(missing)
    with pytest.raises(CourseConfigError, match=missing) as raised:
        check_backend("cloud")
    assert str(raised.value).count(".") <= 2  # one sentence


def test_tinker_key_prefix_is_checked_without_echoing_the_key(no_keys) -> None:
    no_keys.setenv("TINKER_API_KEY", "sk_wrong_service_key_123")
    no_keys.setenv("SAIL_API_KEY", FAKE_SAIL_KEY)
    with pytest.raises(CourseConfigError, match="tml-") as raised:
        check_backend("cloud")
    assert "sk_wrong_service_key_123" not in str(raised.value)


def test_cloud_with_both_keys_passes_the_check(no_keys: pytest.MonkeyPatch) -> None:
    no_keys.setenv("TINKER_API_KEY", FAKE_TINKER_KEY)
    no_keys.setenv("SAIL_API_KEY", FAKE_SAIL_KEY)
    found = check_backend("cloud")
    assert found == "Tinker: TINKER_API_KEY (a tml- key); Sail: SAIL_API_KEY"


FAKE_JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0ZXN0In0.c2lnbmF0dXJlLWZvci10ZXN0cw"


def test_a_jwt_is_accepted_and_named_without_being_shown(no_keys) -> None:
    no_keys.setenv("TINKER_API_KEY", FAKE_JWT)
    no_keys.setenv("SAIL_API_KEY", FAKE_SAIL_KEY)
    found = check_backend("cloud")
    assert "TINKER_API_KEY (a JWT)" in found
    assert FAKE_JWT not in found and FAKE_SAIL_KEY not in found


def test_a_credential_command_is_accepted_without_running_it(no_keys, tmp_path) -> None:
    ran = tmp_path / "ran"
    no_keys.setenv("TINKER_CREDENTIAL_CMD", f"touch {ran}; echo {FAKE_TINKER_KEY}")
    no_keys.setenv("SAIL_API_KEY", FAKE_SAIL_KEY)
    assert "TINKER_CREDENTIAL_CMD" in check_backend("cloud")
    assert not ran.exists()


def test_a_credential_command_wins_over_a_key_tinker_would_refuse(no_keys) -> None:
    """resolve_auth_provider falls back to the command when TINKER_API_KEY has no valid prefix."""
    no_keys.setenv("TINKER_API_KEY", "not-a-tinker-key")
    no_keys.setenv("TINKER_CREDENTIAL_CMD", "echo tml-from-a-command")
    no_keys.setenv("SAIL_API_KEY", FAKE_SAIL_KEY)
    assert "TINKER_CREDENTIAL_CMD" in check_backend("cloud")


def test_stored_logins_of_both_sdks_are_accepted_and_named(no_keys, tmp_path) -> None:
    store_tinker_login(tmp_path / "home", FAKE_TINKER_KEY)
    store_sail_login(tmp_path / "home", FAKE_SAIL_KEY)
    found = check_backend("cloud")
    assert found == (
        "Tinker: the login stored by `tinker auth login` (a tml- key); "
        "Sail: the login stored by `sail auth login`"
    )
    assert FAKE_TINKER_KEY not in found and FAKE_SAIL_KEY not in found


def test_a_key_in_the_environment_wins_over_a_stored_login(no_keys, tmp_path) -> None:
    store_tinker_login(tmp_path / "home", "tml-stored-key-0123456789")
    store_sail_login(tmp_path / "home", "sk_stored")
    no_keys.setenv("TINKER_API_KEY", FAKE_JWT)
    no_keys.setenv("SAIL_API_KEY", FAKE_SAIL_KEY)
    assert check_backend("cloud") == "Tinker: TINKER_API_KEY (a JWT); Sail: SAIL_API_KEY"


def test_an_absurd_simulated_latency_is_refused_in_one_sentence(local_stack) -> None:
    """`Course.simulate_latency` passes the stack's own sentence on, naming the knob and its
    range, instead of a bare HTTP 400; the knobs stay as they were."""
    from types import SimpleNamespace

    from helpers.backend import Course
    from local_stack.client.control_client import get_knobs

    before = get_knobs(local_stack.url)
    with pytest.raises(CourseConfigError, match=r"^latency must be a number between"):
        Course.simulate_latency(SimpleNamespace(backend="local"), latency=1e9)
    assert get_knobs(local_stack.url) == before
