"""What notebook 09's comparison claims, checked on executed notebooks rather than by asserts in
them: whether the shipped adapter beats the base model is a claim about random samples, so a
learner who changes a seed must never meet an AssertionError over it.

Two runs at the defaults, each on a stack of its own, as `make run` makes them: notebook 04,
then 08 shipping its run; and 08 alone, which trains its own short run. A probe cell appended
to 08 prints the comparison's values and the sentence the notebook rendered from them.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from local_stack.client.supervisor import stop_local_stack
from tests.notebook_support import error_outputs, finish, kernel_env, papermill, probe, with_probe

NOTEBOOK = "09_ship_the_adapter.ipynb"
RUN_TIMEOUT_S = 3600  # notebook 04 at its defaults on a busy shared machine
# 04 at its defaults but for the optional reward-hacking section, whose runs 08 never ships.
RUN_04 = {"loophole_steps": 0}

PROBE_STEPS = """checked = {
    "backend": course.backend,
    "shipped_steps": shipped_steps,
    "problems": len(eval_rows),
    "samples": [base_eval["samples"], adapter_eval["samples"]],
    "base": base_eval["reward"],
    "adapter": adapter_eval["reward"],
    "gain": comparison["reward"]["gain"],
    "interval": list(comparison["reward"]["gain_interval"]),
    "rendered": Out[max(Out)].data,  # the Markdown the cell before rendered
}"""

pytestmark = pytest.mark.timeout(2 * RUN_TIMEOUT_S)


def run_08(folder: Path, env: dict) -> dict:
    """Notebook 09 at its defaults with the probe appended after the rendered sentence."""
    notebook = with_probe(NOTEBOOK, folder, "checked", after="verdict = (", steps=PROBE_STEPS)
    code, log = finish(papermill(str(notebook), folder / "08.ipynb", {}, env), RUN_TIMEOUT_S)
    assert code == 0, log[-3000:]
    assert not error_outputs(nbformat.read(folder / "08.ipynb", as_version=4))
    return probe(nbformat.read(folder / "08.ipynb", as_version=4))


@pytest.fixture(scope="module")
def after_04(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("after-04")
    env = kernel_env(folder)
    try:
        code, log = finish(
            papermill("04_training_loop.ipynb", folder / "04.ipynb", RUN_04, env), RUN_TIMEOUT_S
        )
        assert code == 0, log[-3000:]
        return run_08(folder, env)
    finally:
        stop_local_stack(folder / "stack")


@pytest.fixture(scope="module")
def alone(tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder = tmp_path_factory.mktemp("alone")
    try:
        return run_08(folder, kernel_env(folder))
    finally:
        stop_local_stack(folder / "stack")


def rendered_numbers(checked: dict) -> list[str]:
    """The four numbers the sentence states: base, adapter, gain and the interval's ends."""
    return re.findall(r"[-+]\d\.\d{3}", checked["rendered"])


def assert_sentence_states_the_run(checked: dict) -> None:
    """The rendered sentence gives this run's values, and the verdict its interval allows."""
    low, high = checked["interval"]
    values = [checked["base"], checked["adapter"], checked["gain"], low, high]
    assert rendered_numbers(checked) == [f"{v:+.3f}" for v in values], checked["rendered"]
    assert f"Over {checked['problems']} problems" in checked["rendered"]
    assert checked["samples"][0] == checked["samples"][1] == checked["problems"] * 4
    if low > 0:
        assert "the whole interval is above 0" in checked["rendered"]
    elif high < 0:
        assert "the whole interval is below 0" in checked["rendered"]
    else:
        assert "the interval includes 0" in checked["rendered"]


def test_the_adapter_of_notebook_04s_run_beats_the_base_model(after_04: dict) -> None:
    """Shipping notebook 04's default run (90 steps locally), the adapter's gain in mean
    reward on the 393 known facts, 4 samples each, has a paired interval above 0."""
    assert after_04["backend"] == "local" and after_04["shipped_steps"] == 90
    assert after_04["problems"] == 393
    assert_sentence_states_the_run(after_04)
    assert after_04["interval"][0] > 0, after_04


def test_a_short_run_trained_here_is_stated_as_measured(alone: dict) -> None:
    """08 alone ships its own 12-step run: its sentence states the run's numbers, and the
    gain measured is positive (its interval may reach 0, and the sentence then says so)."""
    assert alone["backend"] == "local" and alone["shipped_steps"] == 12
    assert_sentence_states_the_run(alone)
    assert alone["gain"] > 0, alone
