"""Read a task in Harbor's layout and run its verifier, without the cookbook's harbor_env
(which needs `modal`).

- task.toml: `[environment].docker_image` is the image a cloud sandbox starts from.
- instruction.md: what the policy is asked to do.
- environment/: the Dockerfile (its WORKDIR is the working directory) and input files.
- tests/test.sh: the verifier; it writes the reward to /logs/verifier/reward.txt.
- `artifacts` (a top-level key of task.toml, Harbor's own): the files the policy's work
  leaves for the tests, as absolute paths, e.g. `artifacts = ["/app/sum.txt"]`.

Two graders. `grade_in_fresh_sandbox` is the course's: Harbor's separate-verifier mode
(`[verifier].environment_mode = "separate"`). It copies the declared artifacts out of the
policy's sandbox into a fresh sandbox from the same factory, uploads the tests there and
runs them in a clean, non-login shell, so nothing else the policy did can reach the grade.
`run_verifier` is Harbor's shared mode: it grades in the policy's own sandbox, whose login
shell reads files the policy could write (a Sailbox runs every command with `bash -lc` as
root), so a policy can change its own grade there (tests/stack/test_tamper_suite.py).
"""

from __future__ import annotations

import json
import math
import posixpath
import tomllib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tinker_cookbook.sandbox.sandbox_interface import (
    SandboxInterface,
    SandboxResult,
    SandboxTerminatedError,
)

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
# The grader's shell: no login, no rc file, and an environment of only these variables, so
# no BASH_ENV, function, alias or PATH of anyone else's reaches the tests.
CLEAN_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
}
# From /root, as Harbor runs it (some test.sh scripts refuse to run from /).
CLEAN_TESTS_ARGV = [
    "/usr/bin/env",
    "-i",
    *(f"{name}={value}" for name, value in CLEAN_ENV.items()),
    "/bin/bash",
    "--noprofile",
    "--norc",
    "-c",
    f"mkdir -p /logs/verifier && cd /root && exec /bin/bash --noprofile --norc {TESTS_DIR}/test.sh",
]
# The most an artifact may hold: the course's answers are a line; a larger file grades 0.
MAX_ARTIFACT_BYTES = 1 << 20
# The grading sandbox's lifetime budget beyond the tests' own timeout (uploads, the read).
GRADER_LIFETIME_MARGIN_SECONDS = 60


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

    @property
    def artifacts(self) -> tuple[str, ...]:
        """The files the tests read, which the grader copies out of the policy's sandbox."""
        return declared_artifacts(self.config, self.name)

    def test_files(self) -> dict[str, bytes]:
        """The verifier's files, keyed by their path in the sandbox (Harbor puts them in /tests)."""
        return _files_under(self.tests_dir, TESTS_DIR)


def _files_under(root: Path, destination: str, skip: str | None = None) -> dict[str, bytes]:
    return {
        posixpath.join(destination, path.relative_to(root).as_posix()): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and path.name != skip
    }


def declared_artifacts(config: dict[str, Any], name: str) -> tuple[str, ...]:
    """task.toml's `artifacts`: a list of absolute file paths outside /tests and /logs."""
    declared = config.get("artifacts", [])
    if not isinstance(declared, list) or not all(isinstance(p, str) for p in declared):
        raise ValueError(f"task {name}: `artifacts` must be a list of paths, not {declared!r}")
    for path in declared:
        normal = posixpath.isabs(path) and posixpath.normpath(path) == path
        if not normal or path.strip("/").split("/")[0] in ("tests", "logs"):
            raise ValueError(
                f"task {name}: artifact {path!r} must be a normalized absolute path outside "
                "/tests and /logs"
            )
    return tuple(declared)


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
    config = tomllib.loads((task_dir / "task.toml").read_text())
    declared_artifacts(config, task_dir.name)  # a malformed declaration stops here
    return HarborTaskDir(
        name=task_dir.name,
        task_dir=task_dir,
        instruction=(task_dir / "instruction.md").read_text(),
        workdir=dockerfile_workdir(task_dir / "environment"),
        config=config,
    )


class GradingSandbox(SandboxInterface, Protocol):
    """A sandbox that can also run an argv with no shell around it (`Sailbox.exec` can), for
    tests run in a clean shell: the course's Sailbox and the local sandbox both can."""

    async def run_argv(
        self, argv: list[str], timeout: float | None = 60, max_output_bytes: int | None = None
    ) -> SandboxResult: ...


GradingFactory = Callable[[Path, int], Awaitable[GradingSandbox]]


@dataclass(frozen=True)
class Verdict:
    """What one run of a task's verifier decided, and what it printed."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)
    output: str = ""


def _ungraded(reason: str) -> Verdict:
    return Verdict(0.0, {"reward": 0.0, "test_passed": 0.0, "grading_error": 1.0}, reason)


async def grade_in_fresh_sandbox(
    policy_sandbox: SandboxInterface,
    task: HarborTaskDir,
    sandbox_factory: GradingFactory,
    timeout: float,
) -> Verdict:
    """Grade the policy's work where the policy cannot reach: a fresh sandbox from
    `sandbox_factory` (a second Sailbox in the cloud, a second local sandbox locally).

    Only the task's declared `artifacts` cross over, copied out of `policy_sandbox` (one the
    policy did not write is left absent, for the tests to fail); then the task's tests are
    uploaded and run with `CLEAN_TESTS_ARGV`, a non-login shell with a clean environment.
    The policy's login files, processes and every other file stay behind in its own
    sandbox. The grading sandbox is cleaned up before this returns; any step that fails
    grades 0 (`grading_error`).
    """
    if not task.artifacts:
        raise ValueError(
            f"task {task.name} declares no `artifacts` in task.toml, so a fresh sandbox would "
            'receive nothing to grade: add e.g. artifacts = ["/app/answer.txt"]'
        )
    copied: dict[str, str] = {}
    try:
        for path in task.artifacts:
            found = await policy_sandbox.read_file(path, max_bytes=MAX_ARTIFACT_BYTES)
            if found.metrics.get("truncated"):
                return _ungraded(f"{path} holds more than {MAX_ARTIFACT_BYTES} bytes")
            if found.exit_code == 0:
                copied[path] = found.stdout
        grader = await sandbox_factory(
            task.environment_dir, math.ceil(timeout) + GRADER_LIFETIME_MARGIN_SECONDS
        )
    except SandboxTerminatedError as exc:
        return _ungraded(f"a sandbox ended before grading: {exc}")
    try:
        uploads: dict[str, str | bytes] = {**copied, **task.test_files()}
        for path, content in uploads.items():
            written = await grader.write_file(path, content, executable=path.endswith(".sh"))
            if written.exit_code != 0:
                return _ungraded(f"could not upload {path}: {written.stderr}")
        tests = await grader.run_argv(CLEAN_TESTS_ARGV, timeout=timeout)
        reward = await _read_reward(grader)
    except SandboxTerminatedError as exc:
        return _ungraded(f"the grading sandbox ended during grading: {exc}")
    finally:
        await grader.cleanup()
    return _verdict(reward, tests)


def _verdict(reward: float | None, tests: SandboxResult) -> Verdict:
    if reward is None:
        return _ungraded(f"test.sh wrote no valid reward\n{tests.stdout}{tests.stderr}")
    metrics = {"reward": reward, "test_passed": float(reward > 0), "grading_error": 0.0}
    return Verdict(reward, metrics, tests.stdout + tests.stderr)


async def run_verifier(sandbox: SandboxInterface, task: HarborTaskDir, timeout: int) -> Verdict:
    """Grade the sandbox's current state with the task's tests, following Harbor's contract
    in its shared mode: in the policy's own sandbox, through its login shell. The course
    grades with `grade_in_fresh_sandbox`; this one is kept to show what it prevents.

    Unlike the cookbook's `HarborReward`, every step is checked and the verifier starts
    from empty directories, so the reward depends only on what the tests compute in this
    grading: files, symlinks or permissions the policy left in /tests or /logs cannot
    change it, and a step that fails grades 0 (`grading_error`). What it cannot undo is
    the rest of the sandbox: the login files the tests' shell reads (~/.profile, BASH_ENV,
    /etc/profile.d), and on a Sailbox a process still running beside it.
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
    return _verdict(reward, tests)


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
