"""Notebook 06 renders its main comparison from the stored sweep (measurements/stored_sweep.json,
written by scripts/stored_sweep.py) and shows the learner's own runs beside it, labelled as a
noise demonstration. Its cells run in process on a stored file made here from runs written by
hand, so every number it shows can be traced to the file: change the file and the output
changes with it."""

from __future__ import annotations

import json
import re
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest

import helpers.measurements
import sweeps.runs
from exercises.compare_runs import SEEDS_PER_SETTING
from sweeps.compare import (
    comparison_table,
    differing_settings,
    gain_half_width,
    interval_quantile,
    seed_spread,
)
from sweeps.runs import find_runs
from sweeps.stored import stored_run, stored_runs
from tests.notebook_source import cell
from tests.sweep_support import write_sweep_runs

NOTEBOOK = "06_compare_runs"
CELLS = ("cell-01", "cell-03", "cell-05", "cell-07", "cell-09", "cell-10")
STORED_STEPS = 20  # longer than `make sweep`'s 12
PROVENANCE = {
    "script": "scripts/stored_sweep.py",
    "command": "python scripts/stored_sweep.py",
    "date": "1999-01-02",
    "commit": "0123456789abcdef0123456789abcdef01234567",
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A runs/ folder with `make sweep`'s six runs (the learner's), and a stored sweep made
    from six other runs written by hand (`stored-*`), as scripts/stored_sweep.py stores them."""
    root = tmp_path_factory.mktemp("stored")
    write_sweep_runs(root / "runs", [])
    write_sweep_runs(root / "long", ["--name", "stored", "-p", "steps", str(STORED_STEPS)])
    runs = [stored_run(run) for run in find_runs("stored-*", root / "long")]
    return root, {**PROVENANCE, "grid": "sweeps/stored.toml", "runs": runs}


def run_05(
    root: Path, measurement: dict | None, monkeypatch: pytest.MonkeyPatch, runs: str = "sweep-*"
) -> tuple[dict, list, str]:
    """05's cells up to its gain figure, on `measurement` as the stored file (none if None):
    their namespace, what they displayed, and what they printed."""
    measurements = root / f"measurements-{id(measurement)}"
    measurements.mkdir(exist_ok=True)
    if measurement is not None:
        (measurements / "stored_sweep.json").write_text(json.dumps(measurement))
    monkeypatch.setattr(helpers.measurements, "MEASUREMENTS_DIR", measurements)
    monkeypatch.setattr(sweeps.runs, "find_runs", partial(find_runs, runs_dir=root / "runs"))
    shown: list = []
    namespace: dict = {"display": shown.append, "runs": runs}
    printed: list[str] = []
    namespace["print"] = lambda *parts, **_: printed.append(" ".join(map(str, parts)))
    for cell_id in CELLS:
        source = cell(NOTEBOOK, cell_id)
        if cell_id == "cell-01":  # the parameters cell, with `runs` as papermill would set it
            source += f"\nruns = {runs!r}"
        exec(source, namespace)
    plt.close("all")
    return namespace, shown, "\n".join(printed)


def gain_cells(shown: list, label_has: str) -> pd.DataFrame:
    """The gain table displayed right after the heading that contains `label_has`."""
    for heading, table in zip(shown, shown[1:], strict=False):
        if label_has in getattr(heading, "data", ""):
            return table
    raise AssertionError(f"no table under a heading with {label_has!r}: {shown}")


def expected_gains(measurement: dict, metric: str = "reward") -> dict[str, list[str]]:
    """Each stored run's gain column as 05 must show it, worked out from the file alone: the
    stored scores after minus before, and the half-width from the stored counts."""

    def problems(scores: dict) -> dict:
        columns = scores["problems"]
        return {
            "problems": [
                dict(zip(columns, c, strict=True)) for c in zip(*columns.values(), strict=True)
            ]
        }

    expected: dict[str, list[str]] = {}
    for run in measurement["runs"]:
        for name, before in run["before"].items():
            after = run["after"][name]
            half = gain_half_width(problems(before), problems(after), metric)
            gain = after[metric] - before[metric]
            expected.setdefault(run["name"], []).append(f"{gain:+.3f} ± {half:.3f}")
    return expected


def test_stored_runs_compare_as_their_run_folders_do(folders: tuple[Path, dict]) -> None:
    """What the file keeps of a run is all the comparison reads: the table made from the file
    equals the one made from the run folders."""
    root, measurement = folders
    from_folders = comparison_table(find_runs("stored-*", root / "long"))
    from_file = comparison_table(stored_runs(json.loads(json.dumps(measurement))))
    pd.testing.assert_frame_equal(from_file, from_folders)


def test_the_main_comparison_is_rendered_from_the_stored_file(
    folders: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, measurement = folders
    namespace, shown, printed = run_05(root, measurement, monkeypatch)
    assert "made by `python scripts/stored_sweep.py` on 1999-01-02 (commit 0123456789)" in printed
    labels = list(namespace["compared"])
    assert labels[0].startswith(f"stored sweep, {STORED_STEPS} steps a run")
    assert labels[1].startswith("your sweep") and labels[1].endswith("a noise demonstration")
    table = gain_cells(shown, "stored sweep")
    gains = {
        run: list(table.loc[run, [c for c in table if c.endswith(": gain")]]) for run in table.index
    }
    assert gains == expected_gains(measurement)
    first = namespace["tables"][labels[0]][f"{namespace['sets'][0]} gain"]
    assert list(table.index) == list(first.sort_values(ascending=False, kind="stable").index)
    # One row of panels per sweep in the gain figure, the stored sweep's first.
    figure = namespace["figure"]
    assert len(figure.axes) == 2 * len(namespace["sets"])
    assert figure.axes[0].get_title(loc="left").startswith("stored sweep")


def test_a_changed_stored_value_shows_in_the_output(
    folders: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, measurement = folders
    changed = json.loads(json.dumps(measurement))
    run = changed["runs"][0]
    first_set = next(iter(run["after"]))
    run["after"][first_set]["reward"] += 0.5
    _, shown, _ = run_05(root, changed, monkeypatch)
    table = gain_cells(shown, "stored sweep")
    assert table.loc[run["name"], f"{first_set}: gain"] == expected_gains(changed)[run["name"]][0]
    assert expected_gains(changed) != expected_gains(measurement)


def test_without_runs_of_its_own_it_says_what_to_run_and_shows_the_stored_sweep(
    folders: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, measurement = folders
    namespace, shown, printed = run_05(root, measurement, monkeypatch, runs="nothing-here-*")
    assert "run `make sweep` first" in printed
    assert list(namespace["compared"]) == [f"stored sweep, {STORED_STEPS} steps a run"]
    assert len(gain_cells(shown, "stored sweep")) == len(measurement["runs"])


def test_without_a_stored_file_it_compares_the_learners_runs(
    folders: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = folders
    namespace, shown, _ = run_05(root, None, monkeypatch)
    assert list(namespace["compared"]) == ["your sweep, 12 steps a run"]  # no noise label alone
    assert len(gain_cells(shown, "your sweep")) == 6


def seed_lines(namespace: dict, factor: float) -> list[str]:
    """What 05's seed cell prints for the stored sweep when one run's standard error is
    `factor` times the spread between seeds (every run's interval set to match)."""
    printed: list[str] = []
    label, table = next(iter(namespace["tables"].items()))
    runs, first_set = namespace["compared"][label], namespace["sets"][0]
    spread, _ = seed_spread(table, f"{first_set} gain", differing_settings(runs))
    t = interval_quantile(len(runs[0].before()[first_set]["problems"]) - 1)
    table = table.assign(**{f"{first_set} ±": factor * spread * t})
    exec(
        cell(NOTEBOOK, "cell-12"),
        {
            **namespace,
            "tables": {label: table},
            "seeds_per_setting": SEEDS_PER_SETTING.reference,
            "print": lambda *parts, **_: printed.append(" ".join(map(str, parts))),
        },
    )
    return printed


def number_after(lines: list[str], text: str) -> float:
    line = next(line for line in lines if text in line)
    return float(re.match(r"[-+]?\d+\.\d+", line.split(text)[1])[0])


@pytest.mark.parametrize("factor", [0.5, 2.0])
def test_the_seed_rule_never_takes_a_spread_below_one_runs_error(
    folders: tuple[Path, dict], monkeypatch: pytest.MonkeyPatch, factor: float
) -> None:
    """The s of the interval of a difference and of the seed count is the larger of the spread
    between seeds and one run's standard error, which that spread holds."""
    root, measurement = folders
    namespace, _, _ = run_05(root, measurement, monkeypatch)
    lines = seed_lines(namespace, factor)
    spread = number_after(lines, "standard deviation of ")
    one_run = number_after(lines, "from its held-out problems alone: ")
    assert one_run == pytest.approx(factor * spread, abs=2e-3)
    assert number_after(lines, "s = ") == pytest.approx(max(spread, one_run), abs=1e-3)
