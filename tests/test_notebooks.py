"""Every notebook runs top to bottom under papermill with non-default parameters, on the
local backend, with fake cloud keys in the environment that must never show up anywhere.

(nbval runs them with their defaults: `pytest --nbval-lax notebooks/`, part of `make test`.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
FAKE_KEYS = {
    "TINKER_API_KEY": "tml-fake-leak-canary-tinker-7f3a",
    "SAIL_API_KEY": "sk_fake_leak_canary_sail_7f3a",
    "HF_TOKEN": "hf_fake_leak_canary_hub_7f3a",
}
# Small, non-default parameters for each notebook.
SMALL_PARAMETERS = {
    "01_scoring.ipynb": {"example_index": 5, "group_size": 3},
    "02_snapshot_and_serve.ipynb": {
        "example_index": 3,
        "group_size": 2,
        "completion_window": "flex",
    },
    "03_training_loop.ipynb": {
        "steps": 3,
        "group_size": 2,
        "groups_per_step": 4,
        "eval_problems": 10,
        "eval_samples": 1,
        "run_name": "papermill-small",
    },
    "04_sandboxed_rollouts.ipynb": {"group_size": 2, "simulated_boot_seconds": 0.2},
}


@pytest.fixture
def run_env(tmp_path: Path) -> dict[str, str]:
    return notebook_env(tmp_path)


def notebook_env(tmp_path: Path) -> dict[str, str]:
    """The environment of one notebook run: its own runs/ and stack folders, fake keys set."""
    env = {
        **os.environ,
        **FAKE_KEYS,
        "COURSE_RUNS_DIR": str(tmp_path / "runs"),
        "COURSE_LOCAL_STACK_DIR": str(tmp_path / "stack"),
        "PYTHONPATH": str(ROOT),
        "NO_PROXY": "127.0.0.1,localhost",
    }
    env.pop("JPY_SESSION_NAME", None)
    return env


def papermill(notebook: str, out: Path, parameters: dict, env: dict, **kwargs) -> subprocess.Popen:
    args = [sys.executable, "-m", "papermill", str(NOTEBOOKS / notebook), str(out)]
    args += ["--cwd", str(NOTEBOOKS), "--kernel", "python3", "--no-progress-bar"]
    for name, value in parameters.items():
        args += ["-p", name, str(value)]
    return subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kwargs
    )


def finish(process: subprocess.Popen, timeout: float = 600) -> tuple[int, str]:
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def assert_no_key_leaks(*texts: str) -> None:
    for text in texts:
        for name, value in FAKE_KEYS.items():
            assert value not in text, f"{name} leaked"


def all_text_under(folder: Path) -> str:
    return "".join(p.read_bytes().decode("latin-1") for p in folder.rglob("*") if p.is_file())


@pytest.mark.parametrize("notebook", sorted(SMALL_PARAMETERS))
def test_notebook_runs_with_small_parameters(notebook: str, run_env: dict, tmp_path: Path) -> None:
    out = tmp_path / notebook
    code, log = finish(papermill(notebook, out, SMALL_PARAMETERS[notebook], run_env))
    assert code == 0, log[-3000:]
    executed = nbformat.read(out, as_version=4)
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    assert_no_key_leaks(out.read_text(), log, all_text_under(tmp_path / "runs"))


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        ({"backend": "nonsense"}, "backend must be one of 'local', 'cloud'"),
        ({"backend": "cloud"}, "TINKER_API_KEY"),
    ],
)
def test_01_bad_backend_fails_fast_in_one_sentence(
    parameters: dict, expected: str, run_env: dict, tmp_path: Path
) -> None:
    for name in FAKE_KEYS:
        run_env.pop(name)
    started = time.monotonic()
    code, log = finish(papermill("01_scoring.ipynb", tmp_path / "out.ipynb", parameters, run_env))
    assert code != 0 and time.monotonic() - started < 30  # whole process: hangs only
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert executed.metadata.papermill.duration < 10
    [error] = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert error.ename == "CourseConfigError" and expected in error.evalue
    assert len(error.traceback) == 1  # one sentence, no wall of traceback


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("group_size", 1, "group_size must be a whole number >= 2"),
        ("group_size", 0, "group_size must be a whole number >= 2"),
        ("steps", 0, "steps must be a whole number >= 1"),
        ("learning_rate", 0, "learning_rate must be a number greater than 0"),
        ("learning_rate", -0.001, "learning_rate must be a number greater than 0"),
        ("temperature", -1, "temperature must be a number >= 0"),
        ("completion_window", "asap", "completion_window must be 'balanced' or 'flex'"),
        ("completion_window", "priority", "completion_window 'priority' is retired"),
    ],
)
def test_03_invalid_parameter_fails_within_5_s(
    name: str, value: object, expected: str, run_env: dict, tmp_path: Path
) -> None:
    """The check runs before anything slow: the run fails in the first code cell after the
    parameters, within 5 s of papermill starting the notebook (kernel start included).

    Python's own start-up and papermill's imports come before that clock and vary with
    the machine's load, so the whole process gets a loose bound that only catches hangs.
    """
    started = time.monotonic()
    out = tmp_path / "out.ipynb"
    code, log = finish(papermill("03_training_loop.ipynb", out, {name: value}, run_env))
    assert code != 0 and time.monotonic() - started < 30
    executed = nbformat.read(out, as_version=4)
    failing = [
        (i, o)
        for i, c in enumerate(executed.cells)
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]
    [(index, error)] = failing
    assert expected in error.evalue and name in error.evalue
    assert "check_training_params" in executed.cells[index].source  # nothing heavy ran first
    duration = executed.metadata.papermill.duration
    assert duration < 5, f"the notebook took {duration:.1f} s to fail"


def kill_everything_started_with(env: dict) -> None:
    """SIGKILL papermill, its kernel and the kernel's local stack: every process that
    carries this run's COURSE_RUNS_DIR in its environment."""
    import psutil

    marker = env["COURSE_RUNS_DIR"]
    victims = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("COURSE_RUNS_DIR") == marker:
                victims.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    for process in victims:
        process.kill()
    psutil.wait_procs(victims, timeout=10)


def metrics_steps(runs: Path, run_name: str) -> list[int]:
    path = runs / run_name / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line]


def test_03_survives_sail_faults(run_env: dict, tmp_path: Path) -> None:
    """10% of responses fail and 5% answer HTTP 500: the run still completes all 10 steps."""
    run_env["COURSE_SAIL_FAULTS"] = "failed=0.1,http500=0.05"
    parameters = {**SMALL_PARAMETERS["03_training_loop.ipynb"], "steps": 10, "run_name": "faults"}
    code, log = finish(
        papermill("03_training_loop.ipynb", tmp_path / "out.ipynb", parameters, run_env)
    )
    assert code == 0, log[-3000:]
    runs = tmp_path / "runs"
    assert metrics_steps(runs, "faults") == list(range(10))
    records = [json.loads(x) for x in (runs / "faults" / "metrics.jsonl").read_text().splitlines()]
    assert sum(r["dropped_rollouts"] for r in records) > 0


def test_03_resumes_after_a_kill(run_env: dict, tmp_path: Path) -> None:
    """Kill the whole run mid-way (SIGKILL, no clean exit); the re-run continues exactly."""
    parameters = {**SMALL_PARAMETERS["03_training_loop.ipynb"], "steps": 8, "run_name": "killed"}
    runs = tmp_path / "runs"
    first = papermill("03_training_loop.ipynb", tmp_path / "first.ipynb", parameters, run_env)
    deadline = time.monotonic() + 300
    while len(metrics_steps(runs, "killed")) < 3:
        assert first.poll() is None and time.monotonic() < deadline, "first run ended early"
        time.sleep(0.2)
    kill_everything_started_with(run_env)
    first.wait()
    done_before_kill = len(metrics_steps(runs, "killed"))
    assert 3 <= done_before_kill < 8

    code, log = finish(
        papermill("03_training_loop.ipynb", tmp_path / "second.ipynb", parameters, run_env)
    )
    assert code == 0, log[-3000:]
    assert metrics_steps(runs, "killed") == list(range(8))
    second = nbformat.read(tmp_path / "second.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in second.cells for o in c.get("outputs", []))
    assert "resuming 'killed' after step" in printed
