"""How large a mixture-of-experts adapter is before anything is downloaded: the Tinker
archive, its PEFT export, and the memory the conversion holds at its peak.

Every Kimi K2.6 adapter size the course states comes from `estimate_kimi_k26`: notebook 09,
the cloud cost estimate (`budget.cost`) and the docs. The parameters are counted by
`kimi.converter`; this module turns them into bytes. Notebook 09 estimates the tiny local
model's dense archive with the same `ArchiveEstimate`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from kimi.architecture import KIMI_K26, MoeArchitecture
from kimi.converter import converter_export

BF16_BYTES = 2
# A little more than the files for the file system, and in memory for Python and the SDKs.
DISK_SLACK = 1.1
MEMORY_SLACK = 1.1


@dataclass(frozen=True)
class ArchiveEstimate:
    """LoRA parameters of an adapter, the bytes of its Tinker archive and of its PEFT export,
    and the bytes the conversion holds in memory at its peak."""

    parameters: int
    archive_bytes: int
    how: str  # one sentence: what the figure assumes
    export_bytes: int = 0  # 0: the same as the archive (a dense model)
    conversion_memory_bytes: int = 0  # 0: the archive's bytes (nothing copied)

    def __post_init__(self) -> None:
        object.__setattr__(self, "export_bytes", self.export_bytes or self.archive_bytes)
        memory = self.conversion_memory_bytes or self.archive_bytes
        object.__setattr__(self, "conversion_memory_bytes", memory)

    @property
    def disk_bytes(self) -> int:
        """The most on disk at once: the archive and its unpacked files (the archive is then
        deleted), later the unpacked files and the export."""
        peak = max(2 * self.archive_bytes, self.archive_bytes + self.export_bytes)
        return int(peak * DISK_SLACK)

    @property
    def memory_bytes(self) -> int:
        return int(self.conversion_memory_bytes * MEMORY_SLACK)


def estimate_moe(arch: MoeArchitecture, rank: int, bytes_per_parameter: int) -> ArchiveEstimate:
    """An archive of `arch` at `rank` and its export. The conversion holds the whole archive
    in memory, then every tensor it copies, then writes the export from memory."""
    counted = converter_export(arch, rank)
    return ArchiveEstimate(
        parameters=counted.archive,
        archive_bytes=counted.archive * bytes_per_parameter,
        how="",
        export_bytes=counted.export * bytes_per_parameter,
        conversion_memory_bytes=(counted.archive + counted.copied) * bytes_per_parameter,
    )


def estimate_kimi_k26(rank: int) -> ArchiveEstimate:
    """Kimi K2.6 with LoRA on every layer Tinker adapts (MLP, attention, unembedding), in bf16.

    The archive's parameters are the cookbook's `get_lora_param_count` (a test holds them
    equal): routed experts share their hidden-side factor, and attention adapts `q_a_proj`,
    `kv_a_proj_with_mqa` and `o_proj`. The export's are the converter's own count. Assumed,
    not documented: bf16."""
    how = (
        "Tinker's LoRA shapes for Kimi K2.6 as the cookbook counts them, in bf16; "
        "Tinker's archive format and dtype are not documented"
    )
    return dataclasses.replace(estimate_moe(KIMI_K26, rank, BF16_BYTES), how=how)
