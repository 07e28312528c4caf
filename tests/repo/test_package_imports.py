"""The installed packages stand on their own, so `python -m sweeps.runner` works from any
directory without PYTHONPATH (that none imports `scripts/`, which is not installed, is an
import contract in pyproject.toml)."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def installed_packages() -> list[str]:
    """The top-level packages `pip install -e .` maps, as pyproject.toml lists them."""
    found = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return [name.rstrip("*") for name in found["packages"]["find"]["include"]]


def test_sweep_runner_help_works_outside_the_repository(tmp_path: Path) -> None:
    """From a folder outside the checkout, with no PYTHONPATH, this checkout's packages (and
    only those the install maps: no `scripts`) importable, as an editable install makes them.
    Links in the working directory stand in for the install, so the test imports this
    checkout even when the environment's editable install points at another one."""
    for package in installed_packages():
        (tmp_path / package).symlink_to(ROOT / package)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    run = subprocess.run(
        [sys.executable, "-m", "sweeps.runner", "--help"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "usage:" in run.stdout and "--name" in run.stdout
    where = subprocess.run(
        [sys.executable, "-c", "import sweeps.runner as r; print(r.__file__)"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert Path(where.stdout.strip()).resolve() == (ROOT / "sweeps" / "runner.py").resolve()
