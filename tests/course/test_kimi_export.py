"""Kimi K2.6's adapter at its true size, and the converter's expert path run for real.

The size of a PEFT export comes from running the cookbook's own conversion on shape-only
tensors (`kimi.converter.converter_export`); these tests hold its inputs to what is
installed (the cookbook's per-rank counts, the offline tokenizer), its shortcut (one layer of
each kind, scaled) to the full conversion, and its rule to `build_lora_adapter` converting a
small mixture-of-experts archive in Tinker's layout on disk.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from safetensors.torch import load_file
from tinker_cookbook.hyperparam_utils import get_lora_param_count
from tinker_cookbook.weights import build_lora_adapter

from helpers.errors import CourseConfigError
from helpers.shipping import check_free_disk, check_free_memory
from kimi import MODEL_NAME as KIMI_K26
from kimi.adapter_size import ArchiveEstimate, estimate_kimi_k26, estimate_moe
from kimi.architecture import (
    KIMI_K26 as KIMI_SHAPE,
)
from kimi.architecture import (
    TINY_MOE,
    offline_vocab_size,
    tinker_lora_shapes,
)
from kimi.converter import convert_on_meta, converter_export
from kimi.moe_archive import write_base_model_stand_in, write_tinker_moe_adapter


def test_the_vocabulary_is_the_offline_tokenizers() -> None:
    assert KIMI_SHAPE.vocab_size == offline_vocab_size()


@pytest.mark.parametrize("rank", [1, 8, 32])
@pytest.mark.parametrize(
    ("part", "flags"),
    [
        ("mlp", {"train_attn": False, "train_unembed": False}),
        ("self_attn", {"train_mlp": False, "train_unembed": False}),
        ("unembed", {"train_mlp": False, "train_attn": False}),
    ],
)
def test_tinkers_shapes_give_the_cookbooks_count_part_by_part(
    rank: int, part: str, flags: dict
) -> None:
    """The architecture written down in kimi/architecture.py, laid out as Tinker stores an
    adapter (experts sharing their hidden-side factor), has exactly the parameters the
    cookbook bakes in for Kimi K2.6, for the MLP, the attention and the unembedding apart."""
    shapes = tinker_lora_shapes(KIMI_SHAPE, rank)
    ours = sum(math.prod(shape) for name, shape in shapes.items() if f".{part}" in name)
    assert ours == get_lora_param_count(KIMI_K26, lora_rank=rank, **flags)


def test_the_scaled_count_is_the_full_conversions() -> None:
    """Counting one dense and one expert layer, then scaling, equals converting every layer."""
    for arch in (TINY_MOE, dataclasses.replace(KIMI_SHAPE, num_hidden_layers=4)):
        full = convert_on_meta(arch, 4)
        counted = converter_export(arch, 4)
        assert counted.export == sum(count for count, _ in full.values())
        assert counted.copied == sum(count * new for count, new in full.values())


def test_kimi_at_rank_32_from_the_converters_rule() -> None:
    kimi = estimate_kimi_k26(32)
    assert kimi.parameters == get_lora_param_count(KIMI_K26, lora_rank=32)
    export = kimi.export_bytes // 2
    # Worked out by hand from the rule: every expert gets A and B, 384 of them in each of 60
    # expert layers, with the dense layer, the shared expert, attention and unembedding as is.
    moe_layer = 384 * 3 * (7168 + 2048) + 3 * (7168 + 2048)
    attention = 61 * ((7168 + 1536) + (7168 + 576) + (8192 + 7168))
    by_hand = 32 * (60 * moe_layer + 3 * (7168 + 18432) + attention + 7168 + 163_840)
    assert export == by_hand
    assert 20.4e9 < export < 20.6e9 and 40.9e9 < kimi.export_bytes < 41.1e9
    # In memory at once: the whole archive, and every per-expert tensor the converter makes.
    assert kimi.archive_bytes + kimi.export_bytes * 0.99 < kimi.conversion_memory_bytes
    assert kimi.disk_bytes >= kimi.archive_bytes + kimi.export_bytes


def test_build_lora_adapter_converts_the_local_moe_archive(tmp_path) -> None:
    rank = 4
    write_tinker_moe_adapter(tmp_path / "tinker", TINY_MOE, rank, seed=1)
    write_base_model_stand_in(tmp_path / "base", TINY_MOE)
    build_lora_adapter(
        base_model=str(tmp_path / "base"),
        adapter_path=str(tmp_path / "tinker"),
        output_path=str(tmp_path / "peft"),
    )
    tinker = load_file(tmp_path / "tinker" / "adapter_model.safetensors")
    peft = load_file(tmp_path / "peft" / "adapter_model.safetensors")
    experts = TINY_MOE.n_routed_experts
    for layer in range(TINY_MOE.first_k_dense_replace, TINY_MOE.num_hidden_layers):
        at = f"base_model.model.model.layers.{layer}.mlp.experts"
        for tinker_name, peft_name, shared in [
            ("w1", "gate_proj", "A"),
            ("w3", "up_proj", "A"),
            ("w2", "down_proj", "B"),
        ]:
            own = "B" if shared == "A" else "A"
            shared_factor = tinker[f"{at}.{tinker_name}.lora_{shared}.weight"]
            own_factor = tinker[f"{at}.{tinker_name}.lora_{own}.weight"]
            assert shared_factor.shape[0] == 1 and own_factor.shape[0] == experts
            for e in range(experts):
                # Each expert holds its own copy of the shared factor, and its own slice.
                copy = peft[f"{at}.{e}.{peft_name}.lora_{shared}.weight"]
                assert torch.equal(copy, shared_factor[0])
                assert torch.equal(peft[f"{at}.{e}.{peft_name}.lora_{own}.weight"], own_factor[e])
        assert not any(name.startswith(f"{at}.w") for name in peft)
    # Sizes: what the estimate says, counted from the files on disk.
    predicted = estimate_moe(TINY_MOE, rank, bytes_per_parameter=4)
    assert sum(t.numel() * 4 for t in tinker.values()) == predicted.archive_bytes
    assert sum(t.numel() * 4 for t in peft.values()) == predicted.export_bytes
    assert predicted.export_bytes > 1.5 * predicted.archive_bytes
    files = {
        side: (tmp_path / side / "adapter_model.safetensors").stat().st_size
        for side in ("tinker", "peft")
    }
    assert files["peft"] > predicted.export_bytes and files["tinker"] > predicted.archive_bytes
    config = json.loads((tmp_path / "peft" / "adapter_config.json").read_text())
    assert config["r"] == rank and {"gate_proj", "up_proj", "down_proj"} <= set(
        config["target_modules"]
    )


def test_the_memory_check_refuses_in_one_sentence() -> None:
    estimate = ArchiveEstimate(
        1, 10**9, "", export_bytes=4 * 10**9, conversion_memory_bytes=5 * 10**9
    )
    assert check_free_memory(estimate, available=6 * 10**9) == 6 * 10**9
    with pytest.raises(CourseConfigError) as refused:
        check_free_memory(estimate, available=4 * 10**9)
    message = str(refused.value)
    assert "4.0 GB of memory available" in message and "5.5 GB" in message
    assert message.count(". ") == 0 and message.endswith(".")


def test_the_disk_check_counts_the_export(tmp_path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free
    small_archive = ArchiveEstimate(1, free // 4, "", export_bytes=free)
    assert small_archive.disk_bytes > free  # the archive alone, twice, would have fit
    with pytest.raises(CourseConfigError, match="export needs about"):
        check_free_disk(tmp_path, small_archive)
