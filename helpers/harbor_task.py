"""Read a task in Harbor's layout without the cookbook's harbor_env (which needs `modal`).

- task.toml: `[environment].docker_image` is the image a cloud sandbox starts from.
- instruction.md: what the policy is asked to do.
- environment/: the Dockerfile (its WORKDIR is the working directory) and input files.
- tests/test.sh: the verifier; it writes the reward to /logs/verifier/reward.txt.
"""

from __future__ import annotations

import posixpath
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Docker's default is "/", which a sandbox cannot hand out as a writable directory.
DEFAULT_WORKDIR = "/app"


@dataclass(frozen=True)
class HarborTaskDir:
    """One task directory: the instruction, where its files go, and what is uploaded where."""

    name: str
    task_dir: Path
    instruction: str
    workdir: str
    config: dict[str, Any]

    @property
    def environment_dir(self) -> Path:
        """What a sandbox factory receives: the Dockerfile's build context."""
        return self.task_dir / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.task_dir / "tests"

    def input_files(self) -> dict[str, bytes]:
        """The environment's files other than the Dockerfile, keyed by their path in the sandbox.

        A cloud sandbox starts from `[environment].docker_image`, not from a build of the
        Dockerfile, so these files are uploaded into every sandbox rather than baked into an image.
        """
        return {
            posixpath.join(
                self.workdir, path.relative_to(self.environment_dir).as_posix()
            ): path.read_bytes()
            for path in sorted(self.environment_dir.rglob("*"))
            if path.is_file() and path.name != "Dockerfile"
        }


def dockerfile_workdir(environment_dir: Path) -> str:
    """The working directory a container built from `environment_dir/Dockerfile` starts in."""
    dockerfile = environment_dir / "Dockerfile"
    workdir = "/"
    if dockerfile.is_file():
        for line in dockerfile.read_text().splitlines():
            keyword, _, argument = line.strip().partition(" ")
            if keyword.upper() == "WORKDIR" and argument.strip():
                workdir = posixpath.join(workdir, argument.strip())
    return DEFAULT_WORKDIR if workdir == "/" else posixpath.normpath(workdir)


def load_harbor_task(task_dir: str | Path) -> HarborTaskDir:
    task_dir = Path(task_dir).resolve()
    return HarborTaskDir(
        name=task_dir.name,
        task_dir=task_dir,
        instruction=(task_dir / "instruction.md").read_text(),
        workdir=dockerfile_workdir(task_dir / "environment"),
        config=tomllib.loads((task_dir / "task.toml").read_text()),
    )
