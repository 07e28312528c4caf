"""The bubblewrap command line that isolates one sandboxed command, and the check that it works.

Every command gets fresh user, PID, network, IPC and UTS namespaces: it sees only
loopback (not the host's), cannot signal anything outside, and when its first process
exits the kernel kills whatever it left behind. The filesystem is the host's system
directories read-only, plus a few writable directories that belong to one sandbox.

When the training process runs as root, commands run as an unused uid picked per
sandbox: a process-count limit does not apply to root, and a uid that owns nothing
cannot write the host's files even if it got past the read-only mounts.
"""

from __future__ import annotations

import functools
import os
import posixpath
import secrets
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# Host directories the sandbox sees read-only: enough for bash, coreutils and python3.
_SYSTEM_DIRS = ("/usr", "/etc")
# On merged-/usr systems these are symlinks into /usr; elsewhere they are real directories.
_SYSTEM_LINKS_OR_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Top-level names the workdir must not shadow: system mounts and Harbor's verifier directories.
_RESERVED_TOP_LEVEL = frozenset(
    {"usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "proc", "dev", "tests", "logs"}
)
_UNUSED_UID_RANGE = (1_000_000_000, 2_000_000_000)

SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "IS_SANDBOX": "1",
}


@dataclass(frozen=True)
class ResourceLimits:
    """Per-process rlimits inside the sandbox, applied by `prlimit` before the command starts.

    `max_processes` counts processes in the sandbox's own user namespace, so a fork bomb
    stalls at that many instead of filling the machine. There is no disk quota: each file
    is capped at `file_size_bytes`, but a command may write many files.
    """

    cpu_seconds: int = 60
    memory_bytes: int = 1 << 30
    file_size_bytes: int = 64 << 20
    max_processes: int = 128

    def prlimit_argv(self) -> list[str]:
        return [
            "prlimit",
            f"--cpu={self.cpu_seconds}",
            f"--as={self.memory_bytes}",
            f"--fsize={self.file_size_bytes}",
            f"--nproc={self.max_processes}",
            "--core=0",
            "--",
        ]


@dataclass(frozen=True)
class SandboxIdentity:
    """The host uid a sandbox's processes run as: an unused one when we are root, else our own."""

    uid: int | None

    @classmethod
    def pick(cls) -> SandboxIdentity:
        if os.geteuid() != 0:
            return cls(uid=None)
        return cls(uid=secrets.SystemRandom().randrange(*_UNUSED_UID_RANGE))

    def popen_kwargs(self) -> dict[str, object]:
        if self.uid is None:
            return {}
        return {"user": self.uid, "group": self.uid, "extra_groups": []}

    def give(self, path: Path) -> None:
        """Hand a host directory to the sandbox's uid so its processes can write there."""
        if self.uid is not None:
            os.chown(path, self.uid, self.uid)


def check_workdir(workdir: str) -> None:
    """Reject working directories that would have to be mounted over a system directory."""
    top = workdir.strip("/").split("/")[0]
    if not posixpath.isabs(workdir) or not top or top in _RESERVED_TOP_LEVEL:
        raise ValueError(
            f"the local sandbox cannot use {workdir!r} as its working directory: it must be an "
            "absolute path outside /usr, /etc, /bin, /lib, /proc, /dev, /tests and /logs"
        )


@functools.cache
def _system_mounts() -> tuple[str, ...]:
    argv: list[str] = []
    for path in _SYSTEM_DIRS:
        argv += ["--ro-bind", path, path]
    for path in _SYSTEM_LINKS_OR_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return tuple(argv)


def sandbox_argv(
    command: list[str],
    *,
    writable: Mapping[str, Path],
    cwd: str,
    limits: ResourceLimits,
    info_fd: int | None = None,
) -> list[str]:
    """The argv that runs `command` isolated; `writable` maps inside paths to host directories.

    With `info_fd`, bubblewrap writes the host PID of the namespace's init there as JSON.
    """
    argv = ["bwrap"] if info_fd is None else ["bwrap", "--info-fd", str(info_fd)]
    argv += [
        "--unshare-all",
        "--unshare-user",
        "--disable-userns",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--uid",
        "0",
        "--gid",
        "0",
        "--hostname",
        "sandbox",
        "--clearenv",
    ]
    for name, value in SANDBOX_ENV.items():
        argv += ["--setenv", name, value]
    argv += _system_mounts()
    # /tmp and /root exist (Harbor's grader runs test.sh from /root) but are read-only.
    argv += ["--proc", "/proc", "--dev", "/dev", "--dir", "/tmp", "--dir", "/root"]
    for inside, host in writable.items():
        argv += ["--bind", str(host), inside]
    argv += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", cwd, "--"]
    return argv + limits.prlimit_argv() + command


@functools.cache
def isolation_problem() -> str | None:
    """Why commands cannot be isolated on this machine, or None when they can.

    Runs one real sandboxed `true` (once per process), so a kernel without
    unprivileged user namespaces or an old bubblewrap is caught before any
    model-written command runs.
    """
    for tool, package in (("bwrap", "bubblewrap"), ("prlimit", "util-linux")):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install {package})"
    argv = sandbox_argv(["true"], writable={}, cwd="/", limits=ResourceLimits())
    try:
        probe = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=30,
            **SandboxIdentity.pick().popen_kwargs(),
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start ({exc})"
    if probe.returncode != 0:
        detail = probe.stderr.strip().splitlines()[-1:] or [f"exit code {probe.returncode}"]
        return f"bubblewrap cannot create its namespaces here ({detail[0]})"
    return None
