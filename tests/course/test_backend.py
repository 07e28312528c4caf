"""The backend seam refuses bad settings in one sentence, before any remote call."""

from __future__ import annotations

import pytest

from helpers.errors import CourseConfigError
from helpers.params import check_backend

FAKE_TINKER_KEY = "tml-fake-key-for-tests-0123456789"
FAKE_SAIL_KEY = "sk_fake_key_for_tests"


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in ("TINKER_API_KEY", "SAIL_API_KEY", "HF_TOKEN"):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


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
    check_backend("cloud")


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
