"""Notebook 06's cells, run in process on hand-written runs laid out as `make sweep` leaves
them: its interval agrees with notebook 04's bootstrap, its comparison sets like against
like, its gain figure is labelled by setting, and its intervals use t quantiles."""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial

import matplotlib.pyplot as plt
import numpy as np
import pytest

import helpers.measurements
import sweeps.runs
from exercises.compare_runs import SEEDS_PER_SETTING
from helpers.training import bootstrap_interval
from sweeps.compare import gain_half_width
from tests.notebook_source import cell, code_cells, numbers, without_numbers
from tests.sweep_support import write_sweep_runs

NOTEBOOK = "06_compare_runs"
# Student's t at 97.5% for 49 degrees of freedom (50 problems), from a printed table.
T_975_49 = 2.0096


@pytest.mark.parametrize("problems", [30, 100])
def test_its_interval_and_04s_bootstrap_agree_closely(problems: int) -> None:
    """05's standard-error interval and 04's problem bootstrap, both clustered by problem, give
    nearly the same width on problems of mixed difficulty (4 samples each)."""
    rng = np.random.default_rng(problems)
    difficulty = rng.uniform(0.05, 0.6, problems)

    def scored(p_correct: np.ndarray) -> list[dict]:
        correct = rng.binomial(4, p_correct)
        well_formed = np.maximum(correct, rng.binomial(4, 0.9, problems))
        return [
            {"samples": 4, "correct": int(c), "format": int(f), "correct_and_format": int(c),
             "reward": float(c - 0.1 * (4 - f))}
            for c, f in zip(correct, well_formed, strict=True)
        ]  # fmt: skip

    before, after = scored(difficulty), scored(np.minimum(difficulty + 0.1, 1))
    low, high = bootstrap_interval(before, after)["correct"]
    standard_error = gain_half_width({"problems": before}, {"problems": after}, "correct")
    assert standard_error == pytest.approx((high - low) / 2, rel=0.15)


@pytest.fixture(scope="module")
def notebook_05(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Notebook 06's cells up to its gain table, run in process on `make sweep`'s six runs
    (three learning rates, two seeds, three held-out sets of 50 problems), written by hand."""
    runs_dir = tmp_path_factory.mktemp("sweep") / "runs"
    write_sweep_runs(runs_dir, [])
    namespace: dict = {"display": lambda *shown: None}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweeps.runs, "find_runs", partial(sweeps.runs.find_runs, runs_dir=runs_dir))
        # No stored sweep: these runs are the only ones compared (test_notebook_06_stored.py
        # has the stored sweep beside them).
        patch.setattr(helpers.measurements, "MEASUREMENTS_DIR", runs_dir / "no-measurements")
        for cell_id in ("cell-01", "cell-03", "cell-05", "cell-07", "cell-09"):
            exec(cell(NOTEBOOK, cell_id), namespace)
    plt.close("all")
    yield namespace
    plt.close("all")


def printed_by_the_comparison(
    notebook_05: dict, half_width: float, capsys: pytest.CaptureFixture
) -> list[str]:
    """What 05's comparison cell prints when every run's interval is ±`half_width`."""
    ((label, table),) = notebook_05["tables"].items()
    table = table.assign(**{f"{notebook_05['sets'][0]} ±": half_width})
    capsys.readouterr()
    # The exercise's check, whose top-level await exec cannot run, would give the reference.
    tables = {label: table}
    namespace = {**notebook_05, "tables": tables, "seeds_per_setting": SEEDS_PER_SETTING.reference}
    exec(cell(NOTEBOOK, "cell-12"), namespace)
    return capsys.readouterr().out.splitlines()


def test_the_seed_spread_is_compared_with_one_runs_standard_error(
    notebook_05: dict, capsys: pytest.CaptureFixture
) -> None:
    """Like for like: the spread between seeds (a standard deviation) is set against one run's
    standard error, its half-width over t, not against the half-width itself. A spread between
    the two reads as the spread well above both does, and not as one below both."""
    # The spread between seeds, worked out here: each learning rate's two seeds' first-set
    # gains about their mean, pooled.
    table, runs = notebook_05["table"], {run.name: run for run in notebook_05["selected"]}
    by_rate: dict[float, list[float]] = {}
    for name, gain in table[f"{notebook_05['sets'][0]} gain"].items():
        by_rate.setdefault(runs[name].settings["learning_rate"], []).append(gain)
    squares = sum(float(((np.array(g) - np.mean(g)) ** 2).sum()) for g in by_rate.values())
    spread = math.sqrt(squares / sum(len(g) - 1 for g in by_rate.values()))
    assert spread > 0
    t = T_975_49  # every run scores 50 problems of each set
    printed = {}
    for case, standard_error in {"between": 0.6, "above": 0.3, "below": 1.5}.items():
        half_width = round(standard_error * spread * t, 3)
        assert (spread < half_width) == (case != "above")
        lines = printed_by_the_comparison(notebook_05, half_width, capsys)
        assert any(abs(n - half_width / t) < 6e-4 for n in numbers("\n".join(lines))), lines
        printed[case] = [without_numbers(line) for line in lines]
    assert printed["between"] == printed["above"] != printed["below"]


def test_the_gain_figure_labels_its_shared_axis_once_by_setting(notebook_05: dict) -> None:
    """One y axis shared by the three held-out sets' panels, labelled once, by the settings that
    tell the runs apart (not by run names), with the largest gain on top in every panel."""
    namespace = dict(notebook_05)
    exec(cell(NOTEBOOK, "cell-10"), namespace)
    axes = namespace["figure"].axes
    sets, table = notebook_05["sets"], notebook_05["table"]
    assert len(axes) == len(sets) == 3
    assert all(axes[0].get_shared_y_axes().joined(axes[0], ax) for ax in axes[1:])
    by_name = {run.name: run for run in notebook_05["selected"]}
    expected = [
        f"learning_rate={by_name[name].settings['learning_rate']}, "
        f"seed={by_name[name].settings['seed']}"
        for name in table.index
    ]
    assert [label.get_text() for label in axes[0].get_yticklabels()] == expected
    assert not any(ax.yaxis.get_tick_params()["labelleft"] for ax in axes[1:])
    for ax, name in zip(axes, sets, strict=True):
        assert ax.yaxis_inverted()  # position 0, the largest first gain, on top
        points = [c.lines[0].get_xydata() for c in ax.containers]
        assert [y for ((_, y),) in points] == list(range(len(table)))
        assert [x for ((x, _),) in points] == pytest.approx(list(table[f"{name} gain"]))
    plt.close(namespace["figure"])


def test_its_intervals_use_t_quantiles_not_a_normal_constant() -> None:
    source = "\n".join(c.source for c in code_cells(NOTEBOOK))
    assert "Z_95" not in source and "1.96" not in source and "interval_quantile(" in source
