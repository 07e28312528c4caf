"""One size for the Kimi K2.6 adapter: the cookbook's parameter count, used by notebook 09,
the cost estimates and the docs alike."""

from __future__ import annotations

import re

import pytest
from IPython.display import Markdown
from tinker_cookbook.hyperparam_utils import get_lora_param_count

from budget.cost import ASSUMED_ADAPTER_ARCHIVE_GB, ASSUMED_ADAPTER_PARAMETERS
from kimi import MODEL_NAME as KIMI_K26
from kimi.adapter_size import estimate_kimi_k26
from tests.notebook_source import ROOT, cell, flat, numbers


@pytest.mark.parametrize("rank", [1, 8, 32, 64])
def test_the_estimate_is_the_cookbooks_count(rank: int) -> None:
    assert estimate_kimi_k26(rank).parameters == get_lora_param_count(KIMI_K26, lora_rank=rank)


def test_every_mention_of_the_size_is_the_one_figure() -> None:
    kimi = estimate_kimi_k26(32)
    assert ASSUMED_ADAPTER_PARAMETERS == kimi.parameters
    assert kimi.archive_bytes / 1e9 == ASSUMED_ADAPTER_ARCHIVE_GB
    billions = {f"{kimi.parameters / 1e9:.1f}", f"{kimi.export_bytes / 2 / 1e9:.1f}"}
    gigabytes = {f"{kimi.archive_bytes / 1e9:.1f}", f"{kimi.export_bytes / 1e9:.1f}"}
    for doc in ("instructor.md", "cloud.md"):
        text = flat((ROOT / "docs" / doc).read_text())
        # The docs' other sizes (memory, disk, output, totals) are whole gigabytes: the
        # archive's and the PEFT export's (the converter's count) have one decimal.
        assert set(re.findall(r"(\d+\.\d) GB", text)) == gigabytes, doc
        assert set(re.findall(r"(\d+\.\d) billion", text)) <= billions, doc
        assert round(kimi.memory_bytes / 1e9) in numbers(text), doc  # the memory check's size


@pytest.mark.parametrize("rank", [8, 64])
def test_08_renders_the_size_at_its_rank(rank: int) -> None:
    """08's size sentence at another rank: the cookbook's count for that rank, 2 bytes each."""
    source = cell("09_ship_the_adapter", "2b718c68").split("\nif course.backend", 1)[0]
    shown: list = []
    namespace = {"rank": rank, "Markdown": Markdown}
    exec(source, {**namespace, "display": shown.append})
    parameters = get_lora_param_count(KIMI_K26, lora_rank=rank)
    (markdown,) = shown
    stated = numbers(markdown.data)
    assert round(parameters / 1e9, 1) in stated and round(2 * parameters / 1e9, 1) in stated
