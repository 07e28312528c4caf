"""Install the course into the running Python's environment, or fill a wheelhouse for offline use.

`make install` and `make wheelhouse` call this with .venv's Python:

    install.py [--dry-run] install [--torch cpu|cuda] [--wheels DIR]
    install.py [--dry-run] wheelhouse DIR [--torch cpu|cuda] [--platform NAME] [--python-version V]

Why torch gets a step of its own: on Linux the package index's torch wheels are CUDA builds
that bring NVIDIA's CUDA libraries with them, and the course needs only the CPU build, which
PyTorch publishes on its own wheel index. That index is asked for torch alone, and only when
pip cannot find the pinned torch offline first (already installed, or a wheel in the folders
pip is configured to look in), so a machine that has the wheel never waits on that index.
macOS gets a CPU build from the package index as it is.
"""

from __future__ import annotations

import sys

# Checked before anything newer than Python 3.8 runs, so an old Python gets this one sentence.
if sys.version_info < (3, 11):  # noqa: UP036
    sys.exit(f"The course needs Python 3.11 or newer; this is Python {sys.version.split()[0]}.")

import argparse
import json
import platform
import shlex
import subprocess
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = ROOT / "requirements.txt"
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PROBE_TIMEOUT_S = 10
PIP = (sys.executable, "-m", "pip")

# Wheelhouses for a room whose laptops differ from the instructor's (Windows laptops run the
# course in WSL2, which is Linux): pip's platform tags, and the values dependency markers see.
# Linux wheels carry one of several manylinux tags (glibc 2.17 up to torch's 2.28); pip widens
# a macOS tag to the older macOS versions by itself.
_MANYLINUX = [f"manylinux_2_{minor}" for minor in range(28, 16, -1)] + ["manylinux2014"]


@dataclass(frozen=True)
class Target:
    tags: list[str]
    markers: dict[str, str]


def _on(system: str, machine: str) -> dict[str, str]:
    return {"sys_platform": system.lower(), "platform_system": system, "platform_machine": machine}


PLATFORMS = {
    "linux-x86_64": Target([f"{tag}_x86_64" for tag in _MANYLINUX], _on("Linux", "x86_64")),
    "linux-aarch64": Target([f"{tag}_aarch64" for tag in _MANYLINUX], _on("Linux", "aarch64")),
    "macos-arm64": Target(["macosx_14_0_arm64"], _on("Darwin", "arm64")),
}


@dataclass(frozen=True)
class Step:
    """One pip command. If it fails and `fallback` is set, `fallback` runs once `index` answers."""

    pip: tuple[str, ...]
    fallback: tuple[str, ...] = ()
    index: str = ""


def torch_pin(requirements: Path = REQUIREMENTS) -> str:
    """The `torch==X` line of requirements.txt, the one place the pin is written."""
    for line in requirements.read_text().splitlines():
        if line.replace(" ", "").startswith("torch=="):
            return line.strip()
    raise SystemExit(f"{requirements} pins no torch version (a line `torch==X`).")


def build_requirements() -> list[str]:
    """What `pip install -e .` needs offline besides the pins: pip and the build backend."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return ["pip", *pyproject["build-system"]["requires"]]


def _torch_step(pip: tuple[str, ...], pin: str, cpu_index: str) -> Step:
    """The pinned torch found offline if possible, else from the CPU index (torch alone)."""
    return Step(
        pip=(*pip, "--no-deps", "--no-index", pin),
        fallback=(*pip, "--no-deps", "--index-url", cpu_index, pin),
        index=cpu_index,
    )


def _wants_cpu_index(system: str, torch: str) -> bool:
    return torch == "cpu" and system == "Linux"


def install_steps(
    system: str, torch: str, wheels: str | None, cpu_index: str = CPU_INDEX
) -> list[Step]:
    """pip commands for `make install`: pip itself, torch where needed, the course (editable).

    With `wheels`, everything comes from that folder and nothing from the network; its torch
    is whichever build the wheelhouse was made with.
    """
    source = ("--no-index", "--find-links", wheels) if wheels else ()
    steps = [Step(("install", "--quiet", "--upgrade", *source, "pip"))]
    if not wheels and _wants_cpu_index(system, torch):
        steps.append(_torch_step(("install", "--quiet"), torch_pin(), cpu_index))
    steps.append(Step(("install", "--quiet", *source, "--editable", str(ROOT))))
    return steps


def wheelhouse_steps(
    folder: str,
    system: str,
    torch: str,
    tags: list[str],
    python_version: str | None,
    cpu_index: str = CPU_INDEX,
) -> list[Step]:
    """pip commands that download every wheel `install_steps(..., wheels=folder)` needs."""
    target = [arg for tag in tags for arg in ("--platform", tag)]
    if python_version:
        target += ["--python-version", python_version]
    # --find-links folder: the pins resolve to the torch fetched first, since its local version
    # (2.13.0+cpu) sorts above the package index's 2.13.0.
    get = ("download", "--quiet", "--only-binary=:all:", "--dest", folder, "--find-links", folder)
    get += tuple(target)
    steps = [Step((*get, *build_requirements()))]
    if _wants_cpu_index(system, torch):
        steps.append(_torch_step(get, torch_pin(), cpu_index))
    steps.append(Step((*get, "--requirement", str(REQUIREMENTS))))
    return steps


def unreachable(index: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why `index` does not answer a request for torch's page, or None if it does."""
    try:
        with urllib.request.urlopen(f"{index.rstrip('/')}/torch/", timeout=timeout_s):
            return None
    except OSError as error:  # URLError, timeouts and refused connections are all OSErrors
        return str(getattr(error, "reason", error))


def pip_for(target: Target | None, python_version: str | None) -> tuple[str, ...]:
    """pip, evaluating dependency markers for `target` and `python_version` where given."""
    markers = dict(target.markers) if target else {}
    if python_version:
        # X.Y.0 stands for any X.Y: markers on patch releases are rare.
        markers.update(python_version=python_version, python_full_version=f"{python_version}.0")
    if not markers:
        return PIP
    return (sys.executable, str(ROOT / "scripts" / "pip_as_platform.py"), json.dumps(markers))


def _shown(pip: tuple[str, ...], args: tuple[str, ...]) -> str:
    shown = ["pip"] if pip == PIP else [Path(pip[1]).name, *pip[2:]]
    return shlex.join([*shown, *args])


def _pip(pip: tuple[str, ...], args: tuple[str, ...], quiet_failure: bool = False) -> bool:
    print("+ " + _shown(pip, args), flush=True)
    return subprocess.run([*pip, *args], capture_output=quiet_failure).returncode == 0


def run(steps: list[Step], dry_run: bool, pip: tuple[str, ...] = PIP) -> int:
    for step in steps:
        if dry_run:
            print(_shown(pip, step.pip))
            if step.fallback:
                print(f"  if that fails: {_shown(pip, step.fallback)}")
            continue
        # The offline attempt's "no matching distribution" is expected; the fallback speaks.
        if _pip(pip, step.pip, quiet_failure=bool(step.fallback)):
            continue
        if not step.fallback:
            return 1
        reason = unreachable(step.index)
        if reason:
            print(
                f"Cannot reach PyTorch's CPU wheel index {step.index} ({reason}), where Linux "
                "gets torch without CUDA: retry online, install from a wheelhouse "
                "(`make install WHEELS=folder`), or take the package index's CUDA build "
                "(`TORCH=cuda`).",
                file=sys.stderr,
            )
            return 1
        if not _pip(pip, step.fallback):
            return 1
    return 0


def _summary(folder: Path) -> str:
    wheels = list(folder.glob("*.whl"))
    size_mb = sum(wheel.stat().st_size for wheel in wheels) / 1e6
    return f"{folder}: {len(wheels)} wheels, {size_mb:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="print the pip commands only")
    parser.add_argument("--cpu-index", default=CPU_INDEX, help="PyTorch's CPU wheel index")
    commands = parser.add_subparsers(dest="command", required=True)
    install = commands.add_parser("install")
    install.add_argument("--wheels", help="install from this folder alone, with no network")
    wheelhouse = commands.add_parser("wheelhouse")
    wheelhouse.add_argument("folder")
    wheelhouse.add_argument("--platform", choices=sorted(PLATFORMS), help="default: this machine")
    wheelhouse.add_argument("--python-version", help="X.Y, default: this Python")
    for command in (install, wheelhouse):
        command.add_argument("--torch", choices=["cpu", "cuda"], default="cpu")
    args = parser.parse_args(argv)

    if args.command == "install":
        if args.wheels and not any(Path(args.wheels).glob("*.whl")):
            parser.error(f"--wheels {args.wheels}: no wheels there (make wheelhouse fills one)")
        wheels = str(Path(args.wheels).resolve()) if args.wheels else None
        steps = install_steps(platform.system(), args.torch, wheels, args.cpu_index)
        return run(steps, args.dry_run)

    folder = Path(args.folder).resolve()
    target = PLATFORMS[args.platform] if args.platform else None
    system = target.markers["platform_system"] if target else platform.system()
    tags = target.tags if target else []
    steps = wheelhouse_steps(
        str(folder), system, args.torch, tags, args.python_version, args.cpu_index
    )
    status = run(steps, args.dry_run, pip_for(target, args.python_version))
    if status == 0 and not args.dry_run:
        print(_summary(folder))
    return status


if __name__ == "__main__":
    sys.exit(main())
