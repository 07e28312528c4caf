"""A learner's own passing code is the code the step ran: notebook 03 with correct but
different `group_advantages` and `rollout_datum` in the stub cells (each also prints a marker
line when called) passes both checks, and the cells that build the step's advantages
and datums print one marker per group and per completion, so the step trained on theirs.

The run is also notebook 03's solved run: `make solutions`' copy (its other exercises solved
as the notebook's solutions are, which tests/course/test_exercise_checks.py passes through
their checks), at small sizes, so every check must pass."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from tests.notebook_support import (
    assert_every_check_passes,
    finish,
    papermill,
    small,
    solved_copy,
)

NOTEBOOK = "03_one_grpo_step"

# Right, but not the course's code: the baseline is a sum over a count, the datum is built
# from the full sequence's arrays with a slice, and each call leaves a marker.
LEARNER_ADVANTAGES = '''
def group_advantages(rewards_G: torch.Tensor) -> torch.Tensor:
    """Reward minus the group's mean."""
    print("learner advantages ran")
    return rewards_G - rewards_G.sum() / rewards_G.numel()
'''
LEARNER_DATUM = '''
def rollout_datum(
    prompt: list[int], completion: list[int], sampler_logprobs: list[float], advantage: float
) -> tinker.Datum:
    """The full sequence's arrays, shifted by slicing off the first position."""
    print("learner datum ran")
    chose = torch.cat([torch.zeros(len(prompt)), torch.ones(len(completion))])
    logprobs = torch.cat([torch.zeros(len(prompt)), torch.tensor(sampler_logprobs)])
    tokens = torch.tensor(prompt + completion)
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens[:-1].tolist()),
        loss_fn_inputs={
            "target_tokens": tokens[1:],
            "logprobs": logprobs[1:],
            "advantages": (advantage * chose)[1:],
            "mask": chose[1:],
        },
    )
'''
INJECTED = {"exercise-advantages": LEARNER_ADVANTAGES, "exercise-datum": LEARNER_DATUM}


def outputs(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


def test_the_learners_passing_advantages_and_datums_are_what_the_step_trained_on(
    shared_stack_env: dict, tmp_path: Path
) -> None:
    book = nbformat.read(solved_copy(NOTEBOOK, tmp_path / "solutions"), as_version=4)
    stubs = {cell.get("id"): cell for cell in book.cells}
    assert INJECTED.keys() <= stubs.keys(), f"{NOTEBOOK} lost a stub cell"
    for cell_id, source in INJECTED.items():
        stubs[cell_id].source = source.strip()
    edited, out = tmp_path / f"{NOTEBOOK}.ipynb", tmp_path / "out.ipynb"
    nbformat.write(book, edited)

    code, log = finish(papermill(str(edited), out, small(NOTEBOOK), shared_stack_env))
    assert code == 0, log[-3000:]
    executed = nbformat.read(out, as_version=4)
    assert_every_check_passes(executed, NOTEBOOK)
    by_id = {cell.get("id"): cell for cell in executed.cells}
    assert "✓ `group_advantages` passes" in outputs(by_id["check-advantages"])
    assert "✓ `rollout_datum` passes" in outputs(by_id["check-datum"])

    # The step's advantages: one call of the learner's function per group, and the cookbook's
    # agree with every one of them.
    shown = outputs(by_id["e199ce11"])
    groups = int(re.search(r"in \d+ of (\d+) groups", shown).group(1))
    assert f"in {groups} of {groups} groups" in shown
    assert shown.count("learner advantages ran") == groups
    # The learner's datums, one per completion, equal the cookbook's, and are what trained:
    # the loss cell sends `data_D`, which only the learner's function filled.
    shown = outputs(by_id["7cc5ab15"])
    datums = int(re.search(r"in \d+ of (\d+)\b", shown).group(1))
    assert f"in {datums} of {datums}" in shown
    assert shown.count("learner datum ran") == datums
