"""Every notebook parameter has a range: documented in its parameters cell, checked before
anything slow, and refused in one sentence naming the parameter and the range
(issue 10, item 8). A batch whose rollouts all fail stops the run in one sentence too.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import itertools
import math
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

from helpers import notebook_parameters, params
from helpers.errors import CourseConfigError
from helpers.training import AllRolloutsFailedError, CountingPolicy
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
    notebook_parameters.resolve(notebook.removesuffix(".ipynb"), **{**valid, **changes})


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
def test_the_check_cell_reads_every_parameter_into_one_settings_object(notebook: str) -> None:
    """The cell after the parameters is one call that returns the settings object, whose
    fields are the cell's parameters in its order (the order of the checks, so the first
    bad value is named)."""
    stem = notebook.removesuffix(".ipynb")
    names = re.findall(r"^(\w+) = ", _parameters_cell(notebook), re.MULTILINE)
    check = _cell(notebook, lambda cell: "helpers.settings(" in cell.source)
    assert f'cfg = helpers.settings("{stem}", globals())' in check.splitlines()
    fields = [field.name for field in dataclasses.fields(notebook_parameters.SETTINGS[stem])]
    assert fields == names
    assert set(NOTEBOOKS[notebook][0]) == set(names)  # the valid values cover them all
    namespace = {name: value for name, value in NOTEBOOKS[notebook][0].items()}
    cfg = notebook_parameters.settings(stem, namespace)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.backend = "cloud"


@pytest.mark.parametrize("notebook", notebook_parameters.NOTEBOOK_PARAMETERS)
@pytest.mark.parametrize("size", notebook_parameters.PROFILES)
def test_every_size_profile_passes_the_checks(notebook: str, size: str, monkeypatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-fake-key-for-tests-0123456789")
    monkeypatch.setenv("SAIL_API_KEY", "sk_fake_key_for_tests")
    for backend in params.BACKENDS:
        cfg = notebook_parameters.resolve(notebook, backend, size)
        for name, value in notebook_parameters.profile(notebook, size).items():
            assert getattr(cfg, name) == value
        # Each None became the backend's default (08's lora_name stays None: made up later).
        filled = {name: v for name, v in dataclasses.asdict(cfg).items() if name != "lora_name"}
        assert None not in filled.values()


def test_defaults_fill_only_what_is_none() -> None:
    loop = notebook_parameters.LOOP_NOTEBOOK
    assert notebook_parameters.resolve(loop).steps == 90
    assert notebook_parameters.resolve(loop, steps=30).steps == 30
    assert notebook_parameters.resolve(loop, size="small").learning_rate == 1e-3
    # A notebook's own default, not notebook 04's.
    assert notebook_parameters.resolve("03_one_grpo_step").learning_rate == 1e-4
    with pytest.raises(CourseConfigError, match=r"^the profiles are .*, not 'tiny'\.$"):
        notebook_parameters.profile(loop, "tiny")
    with pytest.raises(CourseConfigError, match=r"^lerning_rate is not a parameter of "):
        notebook_parameters.resolve(loop, lerning_rate=1e-3)


def course_imports(module: str) -> set[str]:
    """The `helpers` modules that `helpers/<module>.py` imports, at any depth of its code."""
    tree = ast.parse((ROOT / "helpers" / f"{module}.py").read_text())
    imported = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    } | {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    return {name for name in imported if name.split(".")[0] == "helpers"}


def test_the_rules_import_nothing_of_the_course_but_its_errors() -> None:
    """The rules are a leaf: the declarations import them, and nothing imports back. The
    backend check reads the SDKs' logins through `helpers.logins`, a leaf of its own."""
    assert course_imports("params") == {"helpers.errors", "helpers.logins"}
    assert course_imports("logins") == {"helpers.errors"}


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
    code = "import sys, helpers.notebook_parameters; print(sorted(sys.modules))"
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
