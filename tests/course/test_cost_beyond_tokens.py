"""What a cloud run costs besides tokens: adapter archives, forward passes, Sailbox creations.

Each spending notebook's check cell runs here as the notebook has it (its parameters cell,
then the check cell, with `backend = "cloud"`), which needs no kernel and sends nothing: the
check cells only check and print. The docs' cost tables must state the same counts.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import nbformat
import pytest

from budget.cost import (
    ASSUMED_ADAPTER_ARCHIVE_GB,
    describe_other_costs,
    describe_sandboxes,
    estimate_and_cap,
)

ROOT = Path(__file__).resolve().parents[2]
# With backend="cloud" and the defaults: (adapter archives, rollouts through forward passes).
# 02: the checkpoint signed by hand and sail_policy's; 03: one checkpoint for every draw,
# and the 128 trained rollouts scored before and after the step and twice by the optional
# ppo/cispo cell; 04: 7 steps; 05: 2
# evaluations; 06: 3 x 5 + 4 steps and 4 models scored; 07: 3 steps and 2 evaluations; 08:
# its 7-step run and the shipped checkpoint, and 4 passes over 4 parity rollouts.
CLOUD_OTHER = {
    "02_snapshot_and_serve": (2, 0),
    "03_one_grpo_step": (1, 512),
    "04_training_loop": (7, 0),
    "05_did_it_learn": (2, 0),
    "07_faster_loops": (23, 0),
    "08_sandboxed_rollouts": (5, 0),
    "09_ship_the_adapter": (8, 16),
}
CHECKED_HERE = [
    "02_snapshot_and_serve",
    "03_one_grpo_step",
    "04_training_loop",
    "05_did_it_learn",
    "07_faster_loops",
    "08_sandboxed_rollouts",
    "09_ship_the_adapter",
]
EXPORTS = {"09_ship_the_adapter": 1}  # PEFT exports uploaded to Sail as named LoRAs


def check_cell_output(notebook: str) -> str:
    """What a notebook's parameters and check cells print with backend="cloud"."""
    cells = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4).cells
    [parameters] = [c for c in cells if "parameters" in c.metadata.get("tags", [])]
    [check] = [c for c in cells if c.cell_type == "code" and "helpers.settings(" in c.source]
    namespace: dict = {}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(parameters.source + '\nbackend = "cloud"\n', namespace)  # noqa: S102
        exec(check.source, namespace)  # noqa: S102
    return printed.getvalue()


@pytest.mark.parametrize("notebook", CHECKED_HERE)
def test_each_check_cell_counts_its_archives_and_forward_passes(notebook: str, monkeypatch) -> None:
    monkeypatch.setenv("TINKER_API_KEY", "tml-not-a-real-key")
    monkeypatch.setenv("SAIL_API_KEY", "sk-not-a-real-key")
    archives, forward = CLOUD_OTHER[notebook]
    printed = check_cell_output(notebook)
    exports = EXPORTS.get(notebook, 0)
    assert f"  also: {describe_other_costs('cloud', archives, forward, exports)}\n" in printed
    assert "a rollout cut at its timeout counts in full" in printed


def test_the_archive_line_states_its_size_as_an_assumption_and_invents_no_price() -> None:
    line = describe_other_costs("cloud", 10, 256)
    assert round(ASSUMED_ADAPTER_ARCHIVE_GB, 1) == 9.4  # the cookbook's count, in bf16
    assert "about 94 GB" in line and "assumed 9.4 GB each" in line and "4.7 billion" in line
    assert "at most 256 rollouts scored by Tinker forward passes" in line
    assert "no price known" in line and "PEFT export" not in line


def test_the_export_line_states_the_converters_size_and_unknown_upload_and_hosting() -> None:
    from kimi.adapter_size import estimate_kimi_k26

    line = describe_other_costs("cloud", 8, 16, 1)
    export = estimate_kimi_k26(32).export_bytes / 1e9
    assert f"about {export:,.1f} GB uploaded" in line and "hosted there as a named LoRA" in line
    assert line.endswith("no price known for any of these")
    assert "GB" not in describe_other_costs("local", 8, 16, 1)
    assert "GB" not in describe_other_costs("local", 10, 0)  # the local adapter is tiny
    assert "forward passes" not in describe_other_costs("cloud", 10, 0)  # none: not said


def test_local_runs_print_no_timeout_line_and_nothing_beyond_tokens_when_there_is_none(
    capsys,
) -> None:
    estimate_and_cap("local", 0, max_tokens=4, sampled={"in a group": 2})
    estimate_and_cap("cloud", 8, max_tokens=4, sampled={"in a group": 2})
    local, cloud = capsys.readouterr().out.split("estimate:")[1:]
    assert "cut at its timeout" not in local and "cut at its timeout" in cloud
    assert "also:" not in local + cloud


def test_each_sailbox_is_counted_with_its_creation_charge() -> None:
    cloud = describe_sandboxes({120: 11, 600: 16}, "cloud")
    assert "27 one-time creation charges" in cloud and "no price known" in cloud


def _rows(doc: str) -> dict[str, list[str]]:
    text = (ROOT / doc).read_text()
    part = text[text.index("What a cloud run costs") :]
    part = part[: part.index("\n## ")]
    rows = {}
    for line in part.splitlines():
        if match := re.match(r"\| `(\d\d[a-z]?_\w+)` \|", line):
            rows[match.group(1)] = [cell.strip() for cell in line.split("|")[2:-1]]
    return rows


def _stated(count: int) -> str:
    return "none" if count == 0 else f"{count:,}"


@pytest.mark.parametrize("doc", ["docs/cloud.md", "docs/instructor.md"])
def test_the_docs_cost_tables_count_archives_forward_passes_and_creations(doc: str) -> None:
    rows = _rows(doc)
    for notebook, (archives, forward) in CLOUD_OTHER.items():
        *_, stated_archives, stated_forward = rows[notebook]
        assert stated_archives.startswith(_stated(archives)), (doc, notebook)
        assert stated_forward.startswith(_stated(forward)), (doc, notebook)
    assert "551 Sailboxes" in rows["08_sandboxed_rollouts"][0] + rows["08_sandboxed_rollouts"][2]
    day = sum(archives for archives, _ in CLOUD_OTHER.values())
    flat = " ".join((ROOT / doc).read_text().split())
    assert f"{day} adapter archives (about {day * ASSUMED_ADAPTER_ARCHIVE_GB:,.0f} GB" in flat
    assert "creation charge" in flat


def test_the_cloud_page_says_sail_lora_serving_is_a_pilot_that_every_lora_rollout_needs() -> None:
    flat = " ".join((ROOT / "docs" / "cloud.md").read_text().split())
    assert "LoRA pilot" in flat and "limited" in flat
    assert "every rollout that notebooks 02 to 07 and 09 sample comes from a LoRA" in flat
