"""What the cookbook's converter (`tinker_cookbook.weights.build_lora_adapter`) makes of a
Tinker archive of a Kimi K2-shaped model, counted in parameters without building it.

For a mixture-of-experts model the export is much larger than the archive: the converter
loads the whole archive, then gives each expert its own copy of the factor Tinker shares
between them (`weights/_adapter.py`, `_expand_expert_weights`). `converter_export` counts the
export by running the converter's own conversion on shape-only (meta) tensors, not by a
formula of ours. `kimi.adapter_size` turns the counts into bytes on disk and in memory.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass

from kimi.architecture import MoeArchitecture, hf_weight_names, tinker_lora_shapes


@dataclass(frozen=True)
class ConverterExport:
    """What `build_lora_adapter` makes of a Tinker archive, counted in parameters."""

    archive: int  # in the Tinker archive
    export: int  # in the PEFT export
    copied: int  # in tensors the converter makes anew (each expert's copies), not the archive's


def archive_parameters(arch: MoeArchitecture, rank: int) -> int:
    """The parameters of a Tinker archive of `arch` at `rank`, from Tinker's shapes (no torch)."""
    return sum(math.prod(shape) for shape in tinker_lora_shapes(arch, rank).values())


def convert_on_meta(arch: MoeArchitecture, rank: int) -> dict[str, tuple[int, int]]:
    """Run the converter's own conversion on shape-only tensors of `arch`; per output tensor,
    (parameters, 1 if it is a new tensor, 0 if it is the archive's own)."""
    import torch
    from tinker_cookbook.weights._adapter import _convert_adapter
    from tinker_cookbook.weights._merge import detect_merge_profile

    archive = {
        name: torch.empty(shape, device="meta", dtype=torch.bfloat16)
        for name, shape in tinker_lora_shapes(arch, rank).items()
    }
    names = set(hf_weight_names(arch))
    profile = detect_merge_profile(arch.hf_config(), names)
    export, _, _ = _convert_adapter(archive, names, profile)
    own = {id(tensor) for tensor in archive.values()}
    return {name: (t.numel(), int(id(t) not in own)) for name, t in export.items()}


@functools.cache
def converter_export(arch: MoeArchitecture, rank: int) -> ConverterExport:
    """The converter's export of `arch` at `rank`, counted on a copy with one dense and one
    expert layer (every layer of a kind is the same shape), then scaled to all layers:
    converting Kimi K2.6's 61 layers of shape-only tensors would take seconds, this takes
    a fraction of one. `tests/course/test_kimi_export.py` holds the two ways equal."""
    dense, moe = arch.first_k_dense_replace, arch.num_hidden_layers - arch.first_k_dense_replace
    small = dataclasses.replace(arch, num_hidden_layers=2, first_k_dense_replace=1)
    per_layer = {"dense": [0, 0], "moe": [0, 0], "other": [0, 0]}
    for name, (count, new) in convert_on_meta(small, rank).items():
        layer = re.search(r"\.layers\.(\d+)\.", name)
        kind = "other" if layer is None else ("dense" if layer.group(1) == "0" else "moe")
        per_layer[kind][0] += count
        per_layer[kind][1] += count * new
    weights = {"dense": dense, "moe": moe, "other": 1}
    export = sum(weights[k] * v[0] for k, v in per_layer.items())
    copied = sum(weights[k] * v[1] for k, v in per_layer.items())
    return ConverterExport(archive_parameters(arch, rank), export, copied)
