"""The Makefile's housekeeping: it refuses an old Python in one sentence, and `make clean`
stops the local stack before removing runs/. Each runs make on a copy of the Makefile."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from local_stack import config
from local_stack.client.supervisor import ensure_local_stack, server_processes, stop_local_stack

ROOT = Path(__file__).resolve().parents[2]
OLD_PYTHON = """#!/bin/sh
case "$*" in
  *--version*) echo "Python 3.10.12" ;;
  *sys.version_info*) echo False ;;
  *) exit 3 ;;
esac
"""


def make(folder: Path, *goals: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-C", str(folder), *goals],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_old_python_is_refused_in_one_sentence(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Makefile", tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text(OLD_PYTHON)
    (tmp_path / "bin" / "python3").chmod(0o755)
    path = f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"
    for goals in [("install",), ("run",), ()]:
        refused = make(tmp_path, *goals, PATH=path)
        assert refused.returncode != 0 and refused.stdout == ""
        [line] = refused.stderr.splitlines()
        assert "The course needs Python 3.11 or newer" in line and "3.10.12" in line
    assert not (tmp_path / ".venv").exists()
    assert make(tmp_path, "clean", PATH=path).returncode == 0  # housekeeping still runs


def test_clean_stops_the_stack_then_removes_runs(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Makefile", tmp_path)
    for name in (".venv", "local_stack"):
        (tmp_path / name).symlink_to(ROOT / name)
    storage = tmp_path / "runs" / "local-stack"
    stack = ensure_local_stack(storage)
    try:
        (tmp_path / "runs" / "20260101-000000").mkdir()
        cleaned = make(tmp_path, "clean", **{config.STORAGE_DIR_VAR: str(storage)})
    finally:
        stop_local_stack(storage)
    assert cleaned.returncode == 0, cleaned.stderr
    assert f"stopped (pid {stack.pid})" in cleaned.stdout
    assert server_processes(**{config.STORAGE_DIR_VAR: str(storage.resolve())}) == []
    assert not (tmp_path / "runs").exists()
