"""Notebook 03's rendered sentence follows v1's sign, and the facts it cites from the cookbook
(its default loss, `get_lr`'s exponents) are the installed cookbook's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from tinker.lib.public_interfaces.training_client import TrainingClient
from tinker_cookbook import hyperparam_utils
from tinker_cookbook.rl import train as cookbook_train

from tests.notebook_source import cell, flat, markdown, without_numbers

NOTEBOOK = "03_one_grpo_step"


def rendered(v1: float, v2: float) -> str:
    namespace = {"mean_positive": 0.04, "mean_negative": -0.02}
    namespace["kl_after"] = {"optim/kl_sample_train_v1": v1, "optim/kl_sample_train_v2": v2}
    source = cell(NOTEBOOK, "sides-rendered")
    exec(source.rsplit("\nMarkdown(", 1)[0], namespace)
    return flat(
        eval("Markdown(" + source.rsplit("\nMarkdown(", 1)[1], {**namespace, "Markdown": str})
    )


@pytest.mark.parametrize("v1", [-2.3e-5, 3.4e-4])
def test_the_direction_comes_from_v1s_sign_not_from_v2(v1: float) -> None:
    """v1 averages sampler minus learner logprob over the trained tokens: positive, the step
    pushed their logprob down on the whole. The direction the text gives follows v1's sign and
    does not change with v2, above v1 or below it."""
    texts = [rendered(v1, v2) for v2 in (abs(v1) / 100, abs(v1) * 100)]
    assert without_numbers(texts[0]) == without_numbers(texts[1])
    assert without_numbers(texts[0]) != without_numbers(rendered(-v1, abs(v1) / 100))
    first = re.search(r"\b(up|down)\b", texts[0])
    assert first and first.group(1) == ("down" if v1 > 0 else "up")


def test_the_default_loss_it_names_is_the_cookbooks() -> None:
    text = cell(NOTEBOOK, "3f155921")
    default = inspect.signature(cookbook_train.Config).parameters["loss_fn"].default
    assert default == "importance_sampling" and default in text
    loss_fn = inspect.signature(TrainingClient.forward_backward).parameters["loss_fn"]
    assert loss_fn.default is inspect.Parameter.empty  # Tinker itself has no default loss
    packages = Path(inspect.getsourcefile(cookbook_train)).parents[2]
    cited = re.findall(r"tinker_cookbook/[\w/]+\.py", text)
    assert all((packages / path).is_file() for path in cited), cited


def test_the_get_lr_exponents_it_states_are_the_cookbooks() -> None:
    source = inspect.getsource(hyperparam_utils.get_lr)
    stated = set(re.findall(r"p = (0\.\d+)", markdown(NOTEBOOK)))
    assert stated
    for exponent in stated:
        assert f"exponent_model = {exponent}" in source, exponent
