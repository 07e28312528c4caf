"""`make doctor`: each check fails (or warns) with its fix when its condition is simulated,
and the whole run works here, in one line per check."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import doctor

GB = 1024**3


def test_runs_here_with_one_line_per_check() -> None:
    run = subprocess.run(
        [sys.executable, str(doctor.ROOT / "scripts" / "doctor.py")],
        capture_output=True,
        text=True,
        timeout=120,  # hangs only: the network check waits 4 s at most per source
    )
    lines = run.stdout.splitlines()
    assert len(lines) == len(doctor.CHECKS) + ("FAIL" in run.stdout)  # + the summary line
    assert all(line.split()[0] in ("ok", "warn", "FAIL") for line in lines[: len(doctor.CHECKS)])
    assert run.returncode == (1 if "FAIL" in run.stdout else 0)


def test_an_old_python_fails_with_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "python_version", lambda: (3, 10, 12))
    result = doctor.check_python()
    assert result.status == "FAIL" and "3.10.12" in result.what and "3.11" in result.fix


def test_a_full_disk_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "is_installed", lambda: False)
    monkeypatch.setattr(doctor, "free_disk_bytes", lambda path: 3 * GB)
    result = doctor.check_disk()
    assert result.status == "FAIL" and "3.0 GB free" in result.what and "space" in result.fix
    monkeypatch.setattr(doctor, "is_installed", lambda: True)  # installed: runs need less
    assert doctor.check_disk().status == "ok"


@pytest.mark.parametrize(("available", "status"), [(1 * GB, "FAIL"), (None, "warn")])
def test_too_little_memory(monkeypatch: pytest.MonkeyPatch, available, status: str) -> None:
    monkeypatch.setattr(doctor, "available_memory_bytes", lambda: available)
    result = doctor.check_memory()
    assert result.status == status and f"{doctor.MEMORY_NEEDED_GB:g} GB" in result.what + result.fix


def test_no_package_source_fails(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(doctor, "is_installed", lambda: False)
    settings = {"index-url": "https://index.invalid/simple/", "find-links": str(tmp_path / "no")}
    monkeypatch.setattr(doctor, "pip_setting", settings.get)
    result = doctor.check_packages()
    assert result.status == "FAIL" and "index.invalid" in result.what
    assert "proxy" in result.fix and "wheel folder" in result.fix

    settings["find-links"] = str(tmp_path)  # a wheel folder is enough
    assert doctor.check_packages().status == "ok"


def test_pip_sources_follow_pips_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = {"no-index": "1", "find-links": "/wheels /more", "extra-index-url": None}
    monkeypatch.setattr(doctor, "pip_setting", settings.get)
    assert doctor.pip_sources() == ["/wheels", "/more"]
    settings.pop("no-index")
    assert doctor.pip_sources() == [doctor.DEFAULT_INDEX, "/wheels", "/more"]


def test_a_proxy_that_catches_loopback_warns(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    monkeypatch.setenv("https_proxy", "http://proxy.invalid:3128")
    result = doctor.check_proxy()
    assert result.status == "warn" and "NO_PROXY=127.0.0.1,localhost" in result.fix
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    assert doctor.check_proxy().status == "ok"


def _no_sandbox_problem() -> None:
    return None


@pytest.mark.parametrize(
    ("system", "bwrap", "sysctls", "problem", "status", "expected"),
    [
        ("Darwin", (0, 9), {}, None, "warn", "WSL2"),
        ("Linux", None, {}, None, "warn", "apt-get install bubblewrap"),
        ("Linux", (0, 6), {}, None, "warn", "0.8 or newer"),
        (
            "Linux",
            (0, 9),
            {"kernel.apparmor_restrict_unprivileged_userns": "1"},
            "bubblewrap cannot create its namespaces here (setting up uid map: Permission denied)",
            "warn",
            "kernel.apparmor_restrict_unprivileged_userns=0",
        ),
        (
            "Linux",
            (0, 9),
            {"kernel.unprivileged_userns_clone": "0"},
            "bubblewrap cannot create its namespaces here",
            "warn",
            "kernel.unprivileged_userns_clone=1",
        ),
        (
            "Linux",
            (0, 9),
            {"user.max_user_namespaces": "0"},
            "bubblewrap cannot create its namespaces here",
            "warn",
            "user.max_user_namespaces=",
        ),
        ("Linux", (0, 9), {}, "bubblewrap could not start (odd)", "warn", "docs/install.md"),
        ("Linux", (0, 9), {}, None, "ok", ""),
    ],
)
def test_sandbox_conditions(
    monkeypatch: pytest.MonkeyPatch, system, bwrap, sysctls, problem, status, expected
) -> None:
    monkeypatch.setattr(doctor, "system", lambda: system)
    monkeypatch.setattr(doctor, "bubblewrap_version", lambda: bwrap)
    monkeypatch.setattr(doctor, "sysctl", sysctls.get)
    monkeypatch.setattr(doctor, "sandbox_problem", lambda: problem)
    result = doctor.check_sandbox()
    assert result.status == status and expected in result.fix


def test_sandbox_before_install_checks_what_it_can(monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed() -> None:
        raise ImportError("local_stack")

    monkeypatch.setattr(doctor, "system", lambda: "Linux")
    monkeypatch.setattr(doctor, "bubblewrap_version", lambda: (0, 9))
    monkeypatch.setattr(doctor, "sandbox_problem", not_installed)
    monkeypatch.setattr(doctor, "sysctl", {}.get)
    assert doctor.check_sandbox().status == "ok"
    monkeypatch.setattr(doctor, "sysctl", {"kernel.unprivileged_userns_clone": "0"}.get)
    assert doctor.check_sandbox().status == "warn"


def test_localhost_elsewhere_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.getaddrinfo

    def elsewhere(host, *args, **kwargs):
        if host == "localhost":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.1.2.3", 0))]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", elsewhere)
    result = doctor.check_ports()
    assert result.status == "FAIL" and "10.1.2.3" in result.what and "lo" in result.fix


def test_a_failed_check_fails_the_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(
        doctor,
        "CHECKS",
        [lambda: doctor.Result("ok", "fine"), lambda: doctor.Result("FAIL", "broken", "mend")],
    )
    assert doctor.main() == 1
    assert capsys.readouterr().out.splitlines()[:2] == ["ok    fine", "FAIL  broken  -> mend"]
