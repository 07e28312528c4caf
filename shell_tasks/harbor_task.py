"""Read a task in Harbor's layout and run its verifier, without the cookbook's harbor_env
(which needs `modal`).

- task.toml: `[environment].docker_image` is the image a cloud sandbox starts from.
- instruction.md: what the policy is asked to do.
- environment/: the Dockerfile (its WORKDIR is the working directory) and input files.
- tests/test.sh: the verifier; it writes the reward to /logs/verifier/reward.txt.
"""

from __future__ import annotations

import json
import math
import posixpath
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tinker_cookbook.sandbox.sandbox_interface import SandboxInterface, SandboxTerminatedError

# The course's own tasks, found from this package: a notebook run from any working directory
# (notebooks/ in JupyterLab, the repository root under papermill) finds them.
COURSE_TASKS_DIR = Path(__file__).resolve().parents[1] / "tasks"
# Docker's default is "/", which a sandbox cannot hand out as a writable directory.
DEFAULT_WORKDIR = "/app"
# Harbor's verifier contract: the tests go to /tests, test.sh writes the reward to /logs/verifier.
TESTS_DIR = "/tests"
REWARD_FILES = ("/logs/verifier/reward.txt", "/logs/verifier/reward.json")
# Run before the tests are uploaded: whatever the policy left in the verifier's directories
# (a reward file, a test.sh of its own, a symlink, a directory made unwritable) is removed,
# so the tests that run are the task's, and a reward found afterwards is one they wrote.
_EMPTY_VERIFIER_DIRS = """set -eu
for dir in /tests /logs; do
    if [ -L "$dir" ] || { [ -e "$dir" ] && [ ! -d "$dir" ]; }; then rm -f -- "$dir"; fi
    mkdir -p -- "$dir"
    chmod -R u+rwX -- "$dir"
    find "$dir" -mindepth 1 -delete
done
mkdir /logs/verifier
"""


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
        return _files_under(self.environment_dir, self.workdir, skip="Dockerfile")

    def test_files(self) -> dict[str, bytes]:
        """The verifier's files, keyed by their path in the sandbox (Harbor puts them in /tests)."""
        return _files_under(self.tests_dir, TESTS_DIR)


def _files_under(root: Path, destination: str, skip: str | None = None) -> dict[str, bytes]:
    return {
        posixpath.join(destination, path.relative_to(root).as_posix()): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != skip
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


@dataclass(frozen=True)
class Verdict:
    """What one run of a task's verifier decided, and what it printed."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)
    output: str = ""


def _ungraded(reason: str) -> Verdict:
    return Verdict(0.0, {"reward": 0.0, "test_passed": 0.0, "grading_error": 1.0}, reason)


async def run_verifier(sandbox: SandboxInterface, task: HarborTaskDir, timeout: int) -> Verdict:
    """Grade the sandbox's current state with the task's tests, following Harbor's contract.

    Unlike the cookbook's `HarborReward`, every step is checked and the verifier starts
    from empty directories, so the reward depends only on what the tests compute in this
    grading: files, symlinks or permissions the policy left in /tests or /logs cannot
    change it, and a step that fails grades 0 (`grading_error`). What it cannot undo is
    a process still running beside it, which the local sandbox never allows (each
    command's processes end with it) but a Sailbox does.
    """
    try:
        emptied = await sandbox.run_command(_EMPTY_VERIFIER_DIRS, workdir="/", timeout=timeout)
        if emptied.exit_code != 0:
            return _ungraded(f"could not empty the verifier's directories: {emptied.stderr}")
        for path, content in task.test_files().items():
            written = await sandbox.write_file(path, content, executable=path.endswith(".sh"))
            if written.exit_code != 0:
                return _ungraded(f"could not upload {path}: {written.stderr}")
        # From /root, as Harbor runs it (some test.sh scripts refuse to run from /).
        tests = await sandbox.run_command(
            f"bash {TESTS_DIR}/test.sh", workdir="/root", timeout=timeout
        )
        reward = await _read_reward(sandbox)
    except SandboxTerminatedError as exc:
        return _ungraded(f"the sandbox ended during grading: {exc}")
    if reward is None:
        return _ungraded(f"test.sh wrote no valid reward\n{tests.stdout}{tests.stderr}")
    metrics = {"reward": reward, "test_passed": float(reward > 0), "grading_error": 0.0}
    return Verdict(reward, metrics, tests.stdout + tests.stderr)


async def _read_reward(sandbox: SandboxInterface) -> float | None:
    """The reward test.sh wrote, from reward.txt or else reward.json; None if neither holds one."""
    for path in REWARD_FILES:
        found = await sandbox.read_file(path, max_bytes=4096)
        if found.exit_code != 0 or not found.stdout.strip():
            continue
        try:
            value = json.loads(found.stdout)
            reward = float(value["reward"] if isinstance(value, dict) else value)
        except (ValueError, TypeError, KeyError):
            return None
        return reward if math.isfinite(reward) else None
    return None
