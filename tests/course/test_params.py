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

from helpers import params
from helpers.errors import CourseConfigError
from helpers.rollout_failures import AllRolloutsFailedError, CountingPolicy
from tests.params_support import NAN, NOTEBOOKS

ROOT = Path(__file__).resolve().parents[2]


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
    from local_stack.client.dataset import arithmetic_dataset

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
