"""The writable part of a Sailbox's filesystem, laid out on the host for one local sandbox.

A Sailbox is a VM made from the task's image; the local sandbox shares the host's /usr and
/etc read-only and makes writable only what a Sailbox root writes on the course's path: the
working directory, Harbor's /tests and /logs, and what a login shell reads. A login shell
reads /etc/profile (which sources /etc/profile.d/*.sh) and root's ~/.profile (which, on the
Debian images Sail builds from, sources ~/.bashrc), and a Sailbox root can write all of
them. So the sandbox has a writable HOME, /root, holding the dotfiles Debian gives root, and
writable copies of Debian's /etc/profile and of an empty /etc/profile.d: whatever a command
writes there is read by every later command's shell, as on a Sailbox.
"""

from __future__ import annotations

import os
from pathlib import Path

from local_stack.client.sailbox.isolation import SandboxIdentity

# Harbor's verifier contract: tests are uploaded to /tests and the reward is read from /logs.
_HARBOR_DIRS = ("/tests", "/logs")
# Root's home, as on a Sailbox (HOME=/root): writable, and read by every login shell.
HOME = "/root"
# What a login shell reads, seeded as Debian 12's base-files has them, the files of the
# python:3.11-slim-bookworm image the course's tasks name (root's ~/.profile and ~/.bashrc
# are base-files' dot.profile and dot.bashrc, comments shortened; /etc/profile.d is empty).
HOME_FILES = {
    ".profile": """# ~/.profile: executed by Bourne-compatible login shells.

if [ "$BASH" ]; then
  if [ -f ~/.bashrc ]; then
    . ~/.bashrc
  fi
fi

mesg n 2> /dev/null || true
""",
    ".bashrc": """# ~/.bashrc: executed by bash(1) for non-login shells.

# Note: PS1 and umask are already set in /etc/profile.
# umask 022
""",
}
ETC_PROFILE = """# /etc/profile: system-wide .profile file for the Bourne shell (sh(1))
# and Bourne compatible shells (bash(1), ksh(1), ash(1), ...).

if [ "$(id -u)" -eq 0 ]; then
  PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
else
  PATH="/usr/local/bin:/usr/bin:/bin:/usr/local/games:/usr/games"
fi
export PATH

if [ "${PS1-}" ]; then
  if [ "${BASH-}" ] && [ "$BASH" != "/bin/sh" ]; then
    if [ -f /etc/bash.bashrc ]; then
      . /etc/bash.bashrc
    fi
  else
    if [ "$(id -u)" -eq 0 ]; then
      PS1='# '
    else
      PS1='$ '
    fi
  fi
fi

if [ -d /etc/profile.d ]; then
  for i in /etc/profile.d/*.sh; do
    if [ -r $i ]; then
      . $i
    fi
  done
  unset i
fi
"""
# Writable on a Sailbox, read by login shells; /etc/profile.d starts empty.
_LOGIN_DIRS = (HOME, "/etc/profile.d")


def writable_directories(
    host_dir: Path, workdir: str, identity: SandboxIdentity
) -> dict[str, Path]:
    """Lay out a sandbox's writable directories and login files in `host_dir`, owned by
    the sandbox's root; what each path inside the sandbox is backed by on the host."""
    # Mounted in this order: HOME first, so a working directory inside it (/root/app, say)
    # is mounted over it rather than hidden by it.
    directories = {
        inside: host_dir / inside.strip("/").replace("/", "_")
        for inside in (*_LOGIN_DIRS, workdir, *_HARBOR_DIRS)
    }
    for directory in (host_dir, *directories.values()):
        directory.mkdir(exist_ok=True)
        identity.give(directory)
    for name, text in HOME_FILES.items():
        _seed(directories[HOME] / name, text, identity)
    etc_profile = host_dir / "etc_profile"
    _seed(etc_profile, ETC_PROFILE, identity)
    # The rest of /etc stays the host's, read-only: a path there can be mounted over only
    # where the host has it (every Linux distribution has both).
    return {
        inside: host
        for inside, host in {**directories, "/etc/profile": etc_profile}.items()
        if not inside.startswith("/etc/") or os.path.lexists(inside)
    }


def _seed(path: Path, text: str, identity: SandboxIdentity) -> None:
    """Write one of the files a login shell reads, owned by the sandbox's root."""
    path.write_text(text)
    identity.give(path)
