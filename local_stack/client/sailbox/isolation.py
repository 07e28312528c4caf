"""The command line that isolates one sandboxed command, and the check that it works.

Every command gets fresh user, PID, network, IPC and UTS namespaces: it sees only
loopback (not the host's), cannot signal anything outside, and when its first process
exits the kernel kills whatever it left behind. The filesystem is the host's system
directories read-only, plus a few writable directories that belong to one sandbox.

Nothing of the training process's environment crosses over: bubblewrap itself is started
with only `SANDBOX_ENV`, because its own process inside the sandbox (PID 1 there) keeps the
environment it was started with, and any command can read it from `/proc/1/environ`.

When the training process runs as root, commands run as an unused uid picked per
sandbox: a process-count limit does not apply to root, a limit on that uid counts every
process of the sandbox, and a uid that owns nothing cannot write the host's files even if
it got past the read-only mounts.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import posixpath
import secrets
import shutil
import subprocess
import sys
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

# The whole environment of every process in a sandbox, bubblewrap's own included.
SANDBOX_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "IS_SANDBOX": "1",
}


@dataclass(frozen=True)
class ResourceLimits:
    """What one sandbox may use.

    For the sandbox as a whole, all its commands and their processes together:
    - `memory_bytes`: the memory of its processes plus the files it wrote (they live in
      memory), a memory cgroup; past it the kernel kills a process of the sandbox.
    - `disk_bytes`, `disk_files`: what its writable directories hold (a tmpfs of that
      size); writes past them fail with "No space left on device".
    - `max_processes`: processes and threads alive at once, bubblewrap's two per running
      command included (a limit on the sandbox's own uid); forks past it fail with
      "Resource temporarily unavailable".
    For each process: `cpu_seconds` of CPU time, `address_space_bytes` of virtual memory
    (a large allocation fails with MemoryError before the cgroup's killer is needed), and
    `file_size_bytes` per file.

    The totals need root (see `local_stack.client.sailbox.totals`). Without it they do not
    hold: processes are counted per command, memory per process, and there is no disk quota.
    """

    memory_bytes: int = 1 << 30
    disk_bytes: int = 256 << 20
    disk_files: int = 16_384
    max_processes: int = 128
    cpu_seconds: int = 60
    address_space_bytes: int = 1 << 30
    file_size_bytes: int = 64 << 20

    def __post_init__(self) -> None:
        for limit in dataclasses.fields(self):
            value = getattr(self, limit.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"ResourceLimits.{limit.name} must be an integer >= 1, not {value!r}"
                )

    def prlimit_argv(self) -> list[str]:
        """The per-process limits, set inside the sandbox just before the command starts."""
        return [
            "prlimit",
            f"--cpu={self.cpu_seconds}",
            f"--as={self.address_space_bytes}",
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

    def launch_argv(self, limits: ResourceLimits) -> list[str]:
        """What starts bubblewrap as this identity.

        With its own uid, the process limit is set before bubblewrap creates the user
        namespace, so the kernel checks it against every process of that uid, which is
        every process of this sandbox, across all its commands.
        """
        if self.uid is None:
            return []
        uid = str(self.uid)
        return [
            "setpriv",
            f"--reuid={uid}",
            f"--regid={uid}",
            "--clear-groups",
            "--",
            "prlimit",
            f"--nproc={limits.max_processes}",
            "--",
        ]

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
    """The bubblewrap argv that runs `command` isolated; `writable` maps inside paths to host
    directories. With `info_fd`, bubblewrap writes the host PID of the namespace's init there.
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
    if sys.platform != "linux":  # namespaces are Linux's; WSL2 runs a real Linux kernel
        system = {"darwin": "macOS", "win32": "Windows"}.get(sys.platform, sys.platform)
        return f"it needs Linux (bubblewrap and user namespaces), and this is {system}"
    for tool in ("bwrap", "prlimit", "setpriv"):
        if shutil.which(tool) is None:
            package = "bubblewrap" if tool == "bwrap" else "util-linux"
            return f"`{tool}` is not installed (apt-get install {package})"
    limits = ResourceLimits()
    argv = SandboxIdentity.pick().launch_argv(limits) + sandbox_argv(
        ["true"], writable={}, cwd="/", limits=limits
    )
    try:
        probe = subprocess.run(argv, capture_output=True, text=True, timeout=30, env=SANDBOX_ENV)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start ({exc})"
    if probe.returncode != 0:
        detail = probe.stderr.strip().splitlines()[-1:] or [f"exit code {probe.returncode}"]
        return f"bubblewrap cannot create its namespaces here ({detail[0]})"
    return None
