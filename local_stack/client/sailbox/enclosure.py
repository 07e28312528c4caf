"""The host side of one sandbox: its directory, the totals it may use, and their removal.

When the training process runs as root, each sandbox gets
- a tmpfs of `ResourceLimits.disk_bytes` (and `disk_files` inodes) as its directory, so
  whatever its commands write, together, stays within that size; and
- a memory cgroup of `ResourceLimits.memory_bytes`, nested under the training process's
  own, holding every process of every command of the sandbox (files on the tmpfs count
  too, since they live in memory).
Otherwise the directory is a plain one under the system's temp directory and neither total
holds (`totals_problem` says why).

A process killed while it holds a sandbox (a kernel restarted or killed) never releases it,
so each sandbox's owner holds an `flock` on its owner file, `<directory>.owner`, which also
names its cgroup. The kernel lets go of the lock when its owner dies, however it dies;
`sweep_abandoned`, run before each new sandbox and at each start of the local stack, releases
every sandbox whose owner file nobody holds: its processes, mount, folder and cgroup.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from local_stack.client.sailbox.isolation import ResourceLimits, SandboxIdentity

_CGROUP_FS = Path("/sys/fs/cgroup")
_PREFIX = "local-sandbox-"
_OWNER_SUFFIX = ".owner"
# A killed command's processes are gone within milliseconds; this only bounds a stuck exit.
_RELEASE_SECONDS = 5.0
# Writes the shell's own PID into the cgroup, then becomes the rest of its argv, without
# the PWD the shell exports (the training process's working directory).
_JOIN_CGROUP = 'echo $$ > "$0" && unset PWD && exec "$@"'


@dataclass(frozen=True)
class _MemoryController:
    """Where this process can create memory cgroups, and the file names of that version."""

    parent: Path
    limit_file: str
    swap_file: str
    peak_file: str

    def create(self, name: str, limit_bytes: int) -> Path:
        cgroup = self.parent / name
        cgroup.mkdir()
        try:
            (cgroup / self.limit_file).write_text(str(limit_bytes))
            # No swap: a sandbox's memory stays in RAM, where the limit counts it.
            # (v1 caps memory + swap together, v2 caps swap alone.)
            swap = cgroup / self.swap_file
            if swap.exists():
                v1 = self.swap_file.startswith("memory.memsw")
                swap.write_text(str(limit_bytes) if v1 else "0")
        except OSError:
            cgroup.rmdir()
            raise
        return cgroup


def _memory_controller() -> _MemoryController | None:
    """The training process's own memory cgroup: always nestable under cgroup v1; under v2
    only when it already hands the memory controller to its children."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        relative = path.lstrip("/")
        if "memory" in controllers.split(","):
            return _MemoryController(
                _CGROUP_FS / "memory" / relative,
                "memory.limit_in_bytes",
                "memory.memsw.limit_in_bytes",
                "memory.max_usage_in_bytes",
            )
        if hierarchy == "0" and (_CGROUP_FS / "cgroup.controllers").exists():
            parent = _CGROUP_FS / relative
            with contextlib.suppress(OSError):
                if "memory" in (parent / "cgroup.subtree_control").read_text().split():
                    return _MemoryController(parent, "memory.max", "memory.swap.max", "memory.peak")
    return None


def _mount_tmpfs(directory: Path, limits: ResourceLimits, identity: SandboxIdentity) -> None:
    owner = "" if identity.uid is None else f",uid={identity.uid},gid={identity.uid}"
    options = f"size={limits.disk_bytes},nr_inodes={limits.disk_files},mode=0700,nosuid,nodev"
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options + owner, "tmpfs", str(directory)],
        check=True,
        capture_output=True,
        timeout=30,
    )


@functools.cache
def totals_problem() -> str | None:
    """Why a sandbox's totals cannot be enforced on this machine, or None when they can.

    Tries once per process what every sandbox will do: mount a tmpfs and create a cgroup.
    """
    if os.geteuid() != 0:
        return "the training process is not root, so it can neither mount nor create cgroups"
    controller = _memory_controller()
    if controller is None:
        return "this process's cgroup cannot hold a memory cgroup of its own"
    probe = Enclosure.claim(controller)
    try:
        controller.create(probe.host_dir.name, 1 << 30).rmdir()
        _mount_tmpfs(probe.host_dir, ResourceLimits(), SandboxIdentity(uid=None))
        subprocess.run(["umount", str(probe.host_dir)], check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"creating a cgroup or mounting a tmpfs failed ({exc})"
    finally:
        probe.release()
    return None


def _is_own_regular_file(status: os.stat_result) -> bool:
    return stat.S_ISREG(status.st_mode) and status.st_uid == os.geteuid()


def _recorded_cgroup(recorded: object, name: str) -> Path | None:
    """The cgroup an owner file names, if it is a sandbox's cgroup named `name` (never any
    other cgroup: a sweep kills every process in it)."""
    if not isinstance(recorded, str):
        return None
    cgroup = Path(os.path.normpath(recorded))
    if cgroup.name != name or not cgroup.is_relative_to(_CGROUP_FS) or cgroup.is_symlink():
        return None
    return cgroup


def _remove_tree(path: Path) -> None:
    """Delete a sandbox's files even where a command removed its own write permission.
    A symlink in the directory's place is not ours: nothing it points to is touched."""
    if path.is_symlink():
        return
    for root, dirs, _ in os.walk(path):
        for name in dirs:
            directory = os.path.join(root, name)
            if not os.path.islink(directory):  # never chmod what a planted symlink points to
                with contextlib.suppress(OSError):
                    os.chmod(directory, 0o700)
    shutil.rmtree(path, ignore_errors=True)


def sweep_abandoned() -> list[Path]:
    """Release every sandbox whose owner has died (see the module docstring); returns their
    directories. Only this user's owner files count: /tmp is shared with everyone."""
    swept = []
    for owner_file in Path(tempfile.gettempdir()).glob(f"{_PREFIX}*{_OWNER_SUFFIX}"):
        abandoned = Enclosure.abandoned(owner_file)
        if abandoned is not None:
            abandoned.release()
            swept.append(abandoned.host_dir)
    return swept


class Enclosure:
    """One sandbox's directory on the host and, when enforced, its tmpfs and memory cgroup.

    `owner_fd` is the open, locked owner file: while it is open, no sweep touches this."""

    def __init__(
        self, host_dir: Path, cgroup: Path | None, peak_file: str | None, owner_fd: int
    ) -> None:
        self.host_dir = host_dir
        self._cgroup = cgroup
        self._peak_file = peak_file
        self._owner_fd = owner_fd

    @classmethod
    def claim(cls, controller: _MemoryController | None) -> Enclosure:
        """A new, empty directory with its owner file locked, naming the cgroup it may get
        under `controller` (not yet created)."""
        while True:
            owner_fd, owner_path = tempfile.mkstemp(prefix=_PREFIX, suffix=_OWNER_SUFFIX)
            fcntl.flock(owner_fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
            host_dir = Path(owner_path.removesuffix(_OWNER_SUFFIX))
            cgroup = None if controller is None else controller.parent / host_dir.name
            os.write(owner_fd, json.dumps({"cgroup": cgroup and str(cgroup)}).encode())
            try:
                host_dir.mkdir(mode=0o700)
            except FileExistsError:  # taken by something else meanwhile: another name
                os.unlink(owner_path)
                os.close(owner_fd)
                continue
            return cls(host_dir, None, None, owner_fd)

    @classmethod
    def create(cls, limits: ResourceLimits, identity: SandboxIdentity) -> Enclosure:
        sweep_abandoned()
        if totals_problem() is not None:
            return cls.claim(None)
        controller = _memory_controller()
        assert controller is not None  # totals_problem checked it
        enclosure = cls.claim(controller)
        try:
            _mount_tmpfs(enclosure.host_dir, limits, identity)
            enclosure._cgroup = controller.create(enclosure.host_dir.name, limits.memory_bytes)
        except BaseException:
            enclosure.release()
            raise
        enclosure._peak_file = controller.peak_file
        return enclosure

    @classmethod
    def abandoned(cls, owner_file: Path) -> Enclosure | None:
        """The sandbox `owner_file` names, now owned by us, if its owner has died; else None
        (alive, someone else's, or not an owner file at all)."""
        try:
            owner_fd = os.open(owner_file, os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            held = os.fstat(owner_fd)
            if not _is_own_regular_file(held):
                raise BlockingIOError  # not ours to judge
            fcntl.flock(owner_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError: alive
            if os.lstat(owner_file).st_ino != held.st_ino:
                raise BlockingIOError  # released and replaced since we opened it
            recorded = json.loads(os.pread(owner_fd, 4096, 0) or b"{}").get("cgroup")
        except (OSError, ValueError, AttributeError):
            os.close(owner_fd)
            return None
        host_dir = Path(str(owner_file).removesuffix(_OWNER_SUFFIX))
        cgroup = _recorded_cgroup(recorded, host_dir.name)
        return cls(host_dir, cgroup, None, owner_fd)

    @property
    def totals_enforced(self) -> bool:
        return self._cgroup is not None

    def launch_argv(self) -> list[str]:
        """What puts a command's first process, and so all it starts, in the cgroup."""
        if self._cgroup is None:
            return []
        return ["sh", "-c", _JOIN_CGROUP, str(self._cgroup / "cgroup.procs")]

    def memory_peak_bytes(self) -> int | None:
        """The most memory the sandbox has held at once, as its cgroup counted it."""
        if self._cgroup is None or self._peak_file is None:
            return None
        return int((self._cgroup / self._peak_file).read_text())

    def release(self) -> None:
        """Kill whatever still runs in the sandbox, then remove its files, its cgroup and,
        last (so that a release cut short is swept later), its owner file."""
        deadline = time.monotonic() + _RELEASE_SECONDS
        while self._cgroup is not None and self._kill_members() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.host_dir.is_symlink() and os.path.ismount(self.host_dir):
            # Lazily: a process that has not quite exited must not keep the files alive.
            subprocess.run(["umount", "--lazy", str(self.host_dir)], capture_output=True, timeout=9)
        _remove_tree(self.host_dir)
        while self._cgroup is not None and self._cgroup.exists():
            try:
                self._cgroup.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)
        if self._owner_fd >= 0:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.host_dir}{_OWNER_SUFFIX}")
            os.close(self._owner_fd)
            self._owner_fd = -1

    def _kill_members(self) -> bool:
        """SIGKILL every process in the cgroup; whether there were any."""
        assert self._cgroup is not None
        try:
            members = (self._cgroup / "cgroup.procs").read_text().split()
        except FileNotFoundError:
            return False
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        return bool(members)
