"""Every notebook parameter has a range: documented in its parameters cell, checked before
anything slow, and refused in one sentence naming the parameter and the range
(issue 10, item 8). A batch whose rollouts all fail stops the run in one sentence too.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
import test_notebooks
from test_notebooks import SMALL_PARAMETERS, error_outputs, finish, papermill

from helpers import params
from helpers.errors import CourseConfigError
from helpers.rollout_failures import AllRolloutsFailedError, CountingPolicy

ROOT = Path(__file__).resolve().parent.parent
run_env = test_notebooks.run_env  # the fixture: the run's own runs/ and stack dirs, fake keys
NAN, INF = float("nan"), float("inf")
# Values that are no number at all, or not a whole one, refused by every numeric check.
NOT_WHOLE = [NAN, INF, True, "3", 2.5]
NOT_NUMBERS = [NAN, INF, -INF, True, "1", [1]]

# notebook: (valid values of all its parameters, {parameter: (accepted edges, refused values)})
NOTEBOOKS: dict[str, tuple[dict, dict[str, tuple[list, list]]]] = {
    "01_scoring.ipynb": (
        {"backend": "local", "example_index": 0, "group_size": 4},
        {
            "example_index": ([0, 1073], [-1, 1074, *NOT_WHOLE]),
            "group_size": ([1, 64], [0, 65, 1_000_000, *NOT_WHOLE]),
        },
    ),
    "02_snapshot_and_serve.ipynb": (
        {
            "backend": "local",
            "ttl_seconds": 3600,
            "group_size": 4,
            "max_tokens": None,
            "temperature": 1.0,
            "completion_window": "balanced",
            "example_index": 0,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "ttl_seconds": ([3600, 315_360_000], [3599, 315_360_001, None, *NOT_WHOLE]),
            "group_size": ([1, 64], [0, 65, *NOT_WHOLE]),
            "max_tokens": ([None, 1, 256], [0, 257, 1024, *NOT_WHOLE]),
            "temperature": ([0, 0.0, 0.01, 2, 2.0], [-0.01, 0.001, 2.01, 5, *NOT_NUMBERS]),
            "completion_window": (["balanced", "flex"], ["asap", "priority", "15m", None]),
            "example_index": ([0, 1073], [-1, 1074, *NOT_WHOLE]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "04_training_loop.ipynb": (
        {
            "backend": "local",
            "steps": 3,
            "group_size": 2,
            "groups_per_step": 4,
            "learning_rate": None,
            "max_tokens": None,
            "temperature": 1.0,
            "seed": 0,
            "completion_window": "balanced",
            "run_name": "run",
            "eval_problems": 10,
            "eval_samples": 1,
            "loophole_steps": 0,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "steps": ([None, 1, 10_000], [0, 10_001, *NOT_WHOLE]),
            "loophole_steps": ([0, 60, 10_000], [-1, 10_001, None, *NOT_WHOLE]),
            "group_size": ([2, 64], [1, 0, 65, 1_000_000, *NOT_WHOLE]),
            "groups_per_step": ([1, 1074], [0, 1075, 5000, *NOT_WHOLE]),
            "learning_rate": ([None, 1e-9, 1, 1.0], [0, -1e-3, 1.01, *NOT_NUMBERS]),
            "max_tokens": ([None, 1, 256], [0, 257, *NOT_WHOLE]),
            "temperature": ([0, 0.01, 2], [-0.01, 0.005, 2.01, 5, *NOT_NUMBERS]),
            "seed": ([0, 2**32 - 1], [-1, 2**32, *NOT_WHOLE]),
            "completion_window": (["balanced", "flex"], ["asap", "priority", None]),
            "run_name": (["a", "a" * 64, "run-1.b_2"], ["", "a" * 65, "../up", "a b", None, 3]),
            "eval_problems": ([None, 1, 399], [0, 400, *NOT_WHOLE]),
            "eval_samples": ([None, 1, 64], [0, 65, *NOT_WHOLE]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "07_sandboxed_rollouts.ipynb": (
        {
            "backend": "local",
            "group_size": 4,
            "simulated_boot_seconds": 0.5,
            "max_tokens": 1024,
            "temperature": 1.0,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "group_size": ([1, 16], [0, 17, 64, *NOT_WHOLE]),
            "simulated_boot_seconds": ([0, 0.0, 60], [-0.1, 60.1, *NOT_NUMBERS]),
            "max_tokens": ([1, 262_144], [0, 262_145, None, *NOT_WHOLE]),
            "temperature": ([0, 0.01, 2], [-0.01, 0.005, 2.01, *NOT_NUMBERS]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "06_faster_loops.ipynb": (
        {
            "backend": "local",
            "steps": None,
            "group_size": 8,
            "groups_per_step": 4,
            "max_staleness": 2,
            "learning_rate": None,
            "max_tokens": None,
            "temperature": 1.0,
            "seed": 0,
            "balanced_latency_s": 2.0,
            "flex_latency_s": 5.0,
            "flex_steps": None,
            "train_latency_s": 2.0,
            "eval_problems": None,
            "eval_samples": None,
            "run_name": "faster-loops",
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "steps": ([None, 3, 10_000], [2, 10_001, *NOT_WHOLE]),
            "flex_steps": ([None, 3, 10_000], [2, 10_001, *NOT_WHOLE]),
            "eval_problems": ([None, 1, 399], [0, 400, *NOT_WHOLE]),
            "eval_samples": ([None, 1, 64], [0, 65, *NOT_WHOLE]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "08_ship_the_adapter.ipynb": (
        {
            "backend": "local",
            "run_name": "arithmetic",
            "short_run_steps": None,
            "lora_name": None,
            "lora_prefix": "course",
            "parity_problems": 4,
            "table_problems": 8,
            "max_tokens": None,
            "seed": 0,
            "keep_on_sail": False,
            "budget_sampled_tokens": 1_000_000,
        },
        {
            "short_run_steps": ([None, 1, 10_000], [0, 10_001, *NOT_WHOLE]),
            "lora_name": ([None, "ab", "a" * 64, "a-1"], ["a", "a" * 65, "Course_Adapter", "-ab"]),
            "lora_prefix": (["c", "a" * 20, "my-team"], ["", "a" * 21, "Course", "-x", None]),
            "budget_sampled_tokens": ([0, 10**12], [-1, 10**12 + 1, None, *NOT_WHOLE]),
        },
    ),
    "05_compare_runs.ipynb": (
        {"backend": "local", "runs": "sweep-*", "metric": "reward", "smoothing": 5},
        {
            "runs": (
                ["a", "sweep-* arithmetic", "run[01]-?", "a" * 64, " ".join(["a"] * 64)],
                ["", " ", "../up", "a/b", "a" * 65, " ".join(["a"] * 65), None, 3],
            ),
            "metric": (list(params.HELD_OUT_METRICS), ["accuracy", "", None]),
            "smoothing": ([1, 100], [0, 101, *NOT_WHOLE]),
        },
    ),
}


def _cases(accepted: bool) -> list:
    index = 0 if accepted else 1
    return [
        pytest.param(notebook, name, value, id=f"{notebook[:2]}-{name}={value!r}")
        for notebook, (_, ranges) in NOTEBOOKS.items()
        for name, bounds in ranges.items()
        for value in bounds[index]
    ]


def _check(notebook: str, **changes: object) -> None:
    valid, _ = NOTEBOOKS[notebook]
    params.check_params(notebook.removesuffix(".ipynb"), **{**valid, **changes})


@pytest.mark.parametrize(("notebook", "name", "value"), _cases(accepted=True))
def test_values_at_the_edges_of_each_range_pass(notebook: str, name: str, value: object) -> None:
    _check(notebook, **{name: value})


@pytest.mark.parametrize(("notebook", "name", "value"), _cases(accepted=False))
def test_values_outside_each_range_fail_in_one_sentence(
    notebook: str, name: str, value: object
) -> None:
    with pytest.raises(CourseConfigError) as raised:
        _check(notebook, **{name: value})
    message = str(raised.value)
    assert message.startswith(f"{name} must be") or message.startswith(f"{name} {value!r} is")
    assert message.endswith(".") and ". " not in message  # one sentence
    documented = _parameter_comment(notebook, name)
    for bound in _stated_bounds(message):
        assert re.search(rf"(?<![\d.]){re.escape(bound)}(?![\d])", documented), (
            f"{notebook}: the comment on {name} does not state the bound {bound}: {documented!r}"
        )


def _stated_bounds(message: str) -> list[str]:
    """The numbers of a refusal's range: after 'must be', before '(why)' or ', not <value>'."""
    if " must be " not in message:
        return []  # e.g. "completion_window 'priority' is retired; use ..."
    allowed = message.split(" must be ", 1)[1]
    allowed = re.split(r" \(|, or None|, not ", allowed, maxsplit=1)[0]
    return re.findall(r"\d+(?:\.\d+)?", allowed)


def _cell(notebook: str, is_it: Callable[[nbformat.NotebookNode], bool]) -> str:
    [source] = [c.source for c in nbformat.read(ROOT / "notebooks" / notebook, 4).cells if is_it(c)]
    return source


def _parameters_cell(notebook: str) -> str:
    return _cell(notebook, lambda cell: "parameters" in cell.metadata.get("tags", []))


def _parameter_comment(notebook: str, name: str) -> str:
    """The comment after `name = ...` in the parameters cell, with comment lines below it."""
    lines = _parameters_cell(notebook).splitlines()
    [start] = [i for i, line in enumerate(lines) if line.startswith(f"{name} = ")]
    block = [lines[start].split("#", 1)[1]]
    block += itertools.takewhile(lambda line: line.startswith("#"), lines[start + 1 :])
    return " ".join(block)


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_the_check_cell_passes_every_parameter_in_order(notebook: str) -> None:
    """`check_params` checks what it is given, so a parameter the check cell left out would
    go unchecked; the order is the order of the checks, so the first bad value is named."""
    names = re.findall(r"^(\w+) = ", _parameters_cell(notebook), re.MULTILINE)
    check = _cell(notebook, lambda cell: "check_params(" in cell.source)
    call = re.search(r"check_params\((.*?)\)", check, re.DOTALL).group(1)
    assert re.findall(r"\b(\w+)=\1\b", call) == names
    assert set(NOTEBOOKS[notebook][0]) == set(names)  # the valid values cover them all


@pytest.mark.parametrize(
    ("notebook", "changes", "names"),
    [
        ("04_training_loop.ipynb", {"group_size": 64, "groups_per_step": 65}, "group_size x "),
        ("04_training_loop.ipynb", {"eval_problems": 399, "eval_samples": 11}, "eval_problems x "),
    ],
)
def test_rollouts_in_flight_at_once_are_bounded(notebook: str, changes: dict, names: str) -> None:
    with pytest.raises(CourseConfigError, match=rf"^{names}.* must be at most 4096 rollouts"):
        _check(notebook, **changes)


def test_cloud_ranges_follow_the_cloud_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-fake-key-for-tests-0123456789")
    monkeypatch.setenv("SAIL_API_KEY", "sk_fake_key_for_tests")
    cloud = {"backend": "cloud", "eval_problems": 200, "groups_per_step": 2000}
    _check("04_training_loop.ipynb", **cloud, max_tokens=262_144)
    _check("01_scoring.ipynb", backend="cloud", example_index=1999)
    with pytest.raises(CourseConfigError, match=r"^eval_problems .* from 1 to 200 \(the cloud"):
        _check("04_training_loop.ipynb", **{**cloud, "eval_problems": 201})


def test_data_sizes_are_the_data_connect_loads() -> None:
    from helpers import backend
    from local_stack.dataset import arithmetic_dataset

    local = arithmetic_dataset()
    assert params.TRAIN_PROBLEMS["local"] == len(local["train"])
    assert params.HELD_OUT_PROBLEMS["local"] == len(local["held_out"])
    assert params.TRAIN_PROBLEMS["cloud"] == backend.CLOUD_TRAIN_ROWS
    assert params.HELD_OUT_PROBLEMS["cloud"] == backend.CLOUD_HELD_OUT_ROWS


def test_bounds_are_the_local_services_own() -> None:
    from local_stack.engine import checkpoints
    from local_stack.engine.model import MAX_CONTEXT_TOKENS

    assert params.CONTEXT_TOKENS["local"] == MAX_CONTEXT_TOKENS
    assert (params.MIN_TTL_SECONDS, params.MAX_TTL_SECONDS) == (
        checkpoints.MIN_TTL_SECONDS,
        checkpoints.MAX_TTL_SECONDS,
    )


def test_sail_accepts_the_temperature_range_and_refuses_past_it(local_stack, renderer) -> None:
    import sail

    from local_stack.engine.model import BASE_MODEL_NAME

    convo = [{"role": "user", "content": "What is 2 plus 3?"}]
    prompt, stop = renderer.build_generation_prompt(convo), renderer.get_stop_sequences()

    async def sample(temperature: float):
        completer = sail.SailTokenCompleter(
            model=BASE_MODEL_NAME, max_tokens=4, temperature=temperature
        )
        return await completer(prompt, stop)

    for temperature in (0.0, params.MIN_TEMPERATURE, params.MAX_TEMPERATURE):
        assert asyncio.run(sample(temperature)).tokens
    below_min = math.nextafter(params.MIN_TEMPERATURE, 0.0)
    for temperature in (below_min, math.nextafter(params.MAX_TEMPERATURE, 3.0)):
        with pytest.raises(Exception, match="temperature"):
            asyncio.run(sample(temperature))
    # The SDK writes NaN into the JSON body as a bare NaN, which is not JSON: refused whole.
    with pytest.raises(Exception, match="NaN"):
        asyncio.run(sample(NAN))


def test_the_check_imports_nothing_heavy() -> None:
    """The check cell runs in the first second: no SDK, no torch, no pandas behind it."""
    code = "import sys, helpers.params; print(sorted(sys.modules))"
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    for heavy in ("tinker", "sail", "torch", "pandas", "datasets", "transformers"):
        assert f"'{heavy}'" not in loaded, heavy


def test_counting_policy_raises_only_when_every_rollout_failed() -> None:
    async def answer(model_input, stop):
        return "answer"

    async def refuse(model_input, stop):
        raise ValueError("temperature must be between 0 and 2.\n(param: temperature)")

    async def run(policies: list) -> CountingPolicy:
        counted = CountingPolicy(policies.pop())
        for policy in policies:
            counted.policy = policy
            try:
                await counted(None, None)
            except ValueError:
                pass
        return counted

    some = asyncio.run(run([refuse, answer, refuse, answer]))
    assert (some.answered, some.failed) == (1, 2)
    some.raise_if_all_failed()
    asyncio.run(run([answer])).raise_if_all_failed()  # nothing asked: nothing to report
    every = asyncio.run(run([refuse, refuse, refuse, answer]))
    with pytest.raises(AllRolloutsFailedError) as raised:
        every.raise_if_all_failed()
    assert str(raised.value) == (
        "All 3 rollouts failed, so there is nothing to train on or score; the first was "
        "ValueError: temperature must be between 0 and 2. (param: temperature)."
    )


# End to end: a few papermill runs (each starts a kernel), one or two per notebook.
@pytest.mark.parametrize(
    ("notebook", "name", "value", "expected"),
    [
        ("01_scoring.ipynb", "group_size", 1_000_000, "group_size must be a whole number from 1"),
        (
            "02_snapshot_and_serve.ipynb",
            "temperature",
            NAN,
            "temperature must be 0 (greedy) or a number from 0.01",
        ),
        ("04_training_loop.ipynb", "groups_per_step", 5000, "from 1 to 1074 (the local backend"),
        ("04_training_loop.ipynb", "learning_rate", INF, "greater than 0 and at most 1"),
        ("07_sandboxed_rollouts.ipynb", "group_size", 100, "group_size must be a whole number"),
    ],
)
def test_papermill_with_a_value_out_of_range_fails_in_the_check_cell(
    notebook: str, name: str, value: object, expected: str, run_env: dict, tmp_path: Path
) -> None:
    """The check cell fails, before any heavy import and before anything after it runs.
    (How soon, 3 to 4 s after papermill starts here, is `python -m bench.fail_fast`'s.)
    """
    out = tmp_path / "out.ipynb"
    code, log = finish(papermill(notebook, out, {name: value}, run_env), timeout=120)
    assert code != 0
    executed = nbformat.read(out, as_version=4)
    [(index, error)] = [
        (i, o)
        for i, c in enumerate(executed.cells)
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]
    assert error.ename == "CourseConfigError" and len(error.traceback) == 1
    assert error.evalue.startswith(name) and expected in error.evalue
    assert f"not {value!r}." in error.evalue
    assert executed.cells[index].id == "check-parameters" or "check_params(" in (
        executed.cells[index].source
    )


def test_a_run_whose_rollouts_all_fail_ends_non_zero_in_one_sentence(
    run_env: dict, tmp_path: Path
) -> None:
    """Every Sail response fails: notebook 04 stops at its first evaluation, not green."""
    run_env["COURSE_SAIL_FAULTS"] = "failed=1"
    parameters = {**SMALL_PARAMETERS["04_training_loop.ipynb"], "run_name": "all-fail"}
    code, log = finish(
        papermill("04_training_loop.ipynb", tmp_path / "out.ipynb", parameters, run_env)
    )
    assert code != 0
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    [error] = error_outputs(executed)
    assert error.ename == "AllRolloutsFailedError" and len(error.traceback) == 1
    assert error.evalue.startswith("All 10 rollouts failed") and error.evalue in log
