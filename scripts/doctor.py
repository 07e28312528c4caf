"""Check, in seconds, that this machine can run the course: `make doctor`.

One line per check: `ok`, `warn` (something will not work, but the rest of the course
will) or `FAIL` (fix it first), and how to fix it. Exits 1 if anything failed.

Runs before the course is installed, on whatever `python3` the machine has, so it uses
only the standard library and old Python syntax: it must be able to say "too old".
"""

from __future__ import annotations

import configparser
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
MIN_PYTHON = (3, 11)
# Measured: the installed .venv takes 1.9 GB; pip's downloads and unpacking need room on
# top while it installs. After that, runs and checkpoints take well under 1 GB.
DISK_BEFORE_INSTALL_GB = 4.0
DISK_AFTER_INSTALL_GB = 1.0
# bench/memory.py measured 2.3 GB for the local stack and four kernels after every notebook
# ran (PSS); JupyterLab's server comes on top.
MEMORY_NEEDED_GB = 3.0
MIN_BUBBLEWRAP = (0, 8)
DEFAULT_INDEX = "https://pypi.org/simple/"
NETWORK_TIMEOUT_SECONDS = 4
INSTALLED_STAMP = ROOT / ".venv" / ".installed-requirements"
GB = 1024**3


class Result(NamedTuple):
    status: str  # "ok", "warn" or "FAIL"
    what: str
    fix: str = ""


# --- What the checks read from the machine (tests replace these). -------------------------


def python_version() -> tuple[int, int, int]:
    return sys.version_info[:3]


def free_disk_bytes(path: Path) -> int:
    return shutil.disk_usage(path).free


def available_memory_bytes() -> int | None:
    """Memory available without swapping: MemAvailable on Linux, physical memory elsewhere."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def is_installed() -> bool:
    return INSTALLED_STAMP.exists()


def pip_setting(key: str) -> str | None:
    """A pip option as pip reads it: its PIP_* environment variable, else its config files."""
    value = os.environ.get("PIP_" + key.upper().replace("-", "_"))
    if value is not None:
        return value
    config = configparser.ConfigParser()
    config.read(
        [
            "/etc/pip.conf",
            "/etc/xdg/pip/pip.conf",
            str(Path.home() / ".pip" / "pip.conf"),
            str(Path.home() / ".config" / "pip" / "pip.conf"),
            os.environ.get("PIP_CONFIG_FILE", ""),
        ]
    )
    return config.get("global", key, fallback=None)


def pip_sources() -> list[str]:
    """Where pip would look for packages: its index (unless disabled), extra indexes and
    find-links folders."""
    sources = [] if pip_setting("no-index") else [pip_setting("index-url") or DEFAULT_INDEX]
    for key in ("extra-index-url", "find-links"):
        sources += (pip_setting(key) or "").split()
    return sources


def source_works(source: str) -> bool:
    """A local folder (or file:// URL) that exists, or an index that answers for one small
    project page (through any proxy, as pip would)."""
    if not source.startswith(("http://", "https://")):
        return Path(re.sub("^file://", "", source)).exists()
    url = source.rstrip("/") + "/pip/" if "simple" in source else source
    try:
        with urllib.request.urlopen(url, timeout=NETWORK_TIMEOUT_SECONDS):
            return True
    except OSError:
        return False


def proxies() -> dict:
    return {k: v for k, v in urllib.request.getproxies().items() if k in ("http", "https")}


def loopback_bypasses_proxy() -> bool:
    return all(urllib.request.proxy_bypass(host) for host in ("127.0.0.1", "localhost"))


def system() -> str:
    return platform.system()


def bubblewrap_version() -> tuple[int, ...] | None:
    if shutil.which("bwrap") is None:
        return None
    out = subprocess.run(["bwrap", "--version"], capture_output=True, text=True).stdout
    found = re.search(r"(\d+)\.(\d+)", out)
    return tuple(int(x) for x in found.groups()) if found else (0, 0)


def sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().strip()
    except OSError:
        return None


def sandbox_problem() -> str | None:
    """The local sandbox's own check (one real sandboxed `true`): None when it works.
    Raises ImportError before the course is installed."""
    from local_stack.client.sailbox.isolation import isolation_problem

    return isolation_problem()


def loopback_problem() -> str | None:
    """Bind a free port on 127.0.0.1, connect to it, and resolve `localhost` (Jupyter's)."""
    try:
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))
            server.listen(1)
            socket.create_connection(server.getsockname(), timeout=2).close()
        addresses = {info[4][0] for info in socket.getaddrinfo("localhost", None)}
    except OSError as error:
        return str(error)
    if not addresses & {"127.0.0.1", "::1"}:
        return f"localhost resolves to {sorted(addresses)}, not to this machine"
    return None


# --- The checks. ---------------------------------------------------------------------------


def check_python() -> Result:
    version = python_version()
    shown = ".".join(map(str, version))
    if version[:2] >= MIN_PYTHON:
        return Result("ok", f"Python {shown} ({sys.executable})")
    return Result(
        "FAIL",
        f"Python {shown} ({sys.executable}) is older than 3.11",
        "install Python 3.11 or newer (python.org, or `sudo apt install python3.11 "
        "python3.11-venv`) and make it the `python3` on your PATH",
    )


def check_disk() -> Result:
    need = DISK_AFTER_INSTALL_GB if is_installed() else DISK_BEFORE_INSTALL_GB
    free = free_disk_bytes(ROOT) / GB
    what = f"disk: {free:.1f} GB free in {ROOT} ({need:g} GB needed)"
    if free >= need:
        return Result("ok", what)
    return Result("FAIL", what, "free some space, or clone the course onto a bigger disk")


def check_memory() -> Result:
    available = available_memory_bytes()
    if available is None:
        return Result(
            "warn", "memory: could not measure", f"the course needs {MEMORY_NEEDED_GB:g} GB"
        )
    what = f"memory: {available / GB:.1f} GB available ({MEMORY_NEEDED_GB:g} GB needed)"
    if available / GB >= MEMORY_NEEDED_GB:
        return Result("ok", what)
    return Result(
        "FAIL",
        what,
        "close other programs; with fewer notebooks open at once (File > Close and Shut Down "
        "Notebook) the course needs less",
    )


def check_packages() -> Result:
    if is_installed():
        return Result("ok", "packages: installed in .venv (no index needed)")
    sources = pip_sources()
    working = [s for s in sources if source_works(s)]
    if working:
        return Result("ok", f"packages: reachable at {working[0]}")
    return Result(
        "FAIL",
        f"packages: none of {', '.join(sources)} can be reached",
        "connect to the network (set HTTPS_PROXY if you are behind a proxy), or install from "
        "a wheel folder copied from another machine",
    )


def check_proxy() -> Result:
    found = proxies()
    if not found:
        return Result("ok", "proxy: none set")
    if loopback_bypasses_proxy():
        return Result("ok", f"proxy: {', '.join(sorted(found))} proxy set; loopback bypasses it")
    return Result(
        "warn",
        "proxy: set, and requests to 127.0.0.1 would go through it",
        "export NO_PROXY=127.0.0.1,localhost no_proxy=127.0.0.1,localhost in your shell (the "
        "course's kernels set it themselves; tools you start by hand do not)",
    )


def check_sandbox() -> Result:
    """Notebook 08's local sandbox: bubblewrap 0.8+ and unprivileged user namespaces."""
    if system() != "Linux":
        return Result(
            "warn",
            f"sandbox: the local sandbox needs Linux, this is {system()}",
            "notebook 08 runs its sandboxed commands only in the cloud here (on Windows, "
            "run the course in WSL2)",
        )
    version = bubblewrap_version()
    if version is None or version[:2] < MIN_BUBBLEWRAP:
        found = "not installed" if version is None else "older than 0.8"
        return Result(
            "warn",
            f"sandbox: bubblewrap is {found}",
            "sudo apt-get install bubblewrap (0.8 or newer: Debian 12, Ubuntu 24.04)",
        )
    try:
        problem = sandbox_problem()
    except Exception:  # not installed yet (or a Python too old to import it)
        problem = "unknown"
    if problem is None:
        return Result("ok", "sandbox: bubblewrap can isolate commands here")
    blocked = _namespace_blocker()
    if blocked is not None:
        return Result("warn", f"sandbox: {blocked[0]}", blocked[1])
    if problem == "unknown":
        return Result("ok", "sandbox: bubblewrap installed (fully checked once the course is)")
    return Result("warn", f"sandbox: {problem}", 'see docs/install.md, "Where it runs"')


def _namespace_blocker() -> tuple[str, str] | None:
    """The sysctl that forbids unprivileged user namespaces, if one does, and its fix."""
    if sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        return (
            "AppArmor restricts unprivileged user namespaces",
            "sudo sysctl kernel.apparmor_restrict_unprivileged_userns=0 (until reboot; put it "
            "in /etc/sysctl.d/ to keep it), or give bwrap an AppArmor profile that allows them",
        )
    if sysctl("kernel.unprivileged_userns_clone") == "0":
        return (
            "unprivileged user namespaces are disabled",
            "sudo sysctl kernel.unprivileged_userns_clone=1",
        )
    if sysctl("user.max_user_namespaces") == "0":
        return ("user namespaces are disabled", "sudo sysctl user.max_user_namespaces=10000")
    return None


def check_ports() -> Result:
    problem = loopback_problem()
    if problem is None:
        return Result("ok", "ports: 127.0.0.1 accepts connections and localhost is loopback")
    return Result(
        "FAIL",
        f"ports: loopback does not work ({problem})",
        "the local stack and Jupyter listen on 127.0.0.1: check that the `lo` interface is up "
        "and that no firewall blocks loopback",
    )


CHECKS: list[Callable[[], Result]] = [
    check_python,
    check_disk,
    check_memory,
    check_packages,
    check_proxy,
    check_sandbox,
    check_ports,
]


def main() -> int:
    results = [check() for check in CHECKS]
    for result in results:
        fix = f"  -> {result.fix}" if result.fix else ""
        print(f"{result.status:5s} {result.what}{fix}")
    failed = sum(r.status == "FAIL" for r in results)
    if failed:
        print(f"{failed} check(s) failed; fix them and run `make doctor` again")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
