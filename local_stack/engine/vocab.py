"""A compact vocabulary: the few hundred real Kimi K2.6 token ids the local course uses.

The tiny local model cannot afford Kimi's 160k-row embedding, yet the SDKs, the renderer
and the cookbook must see real Kimi ids. So the model works on compact ids (0..size-1)
and the server translates at its edges. Compact id 0 is the unknown token: any real id
outside the subset maps to it, and it maps back to a reserved Kimi special token.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

UNK_COMPACT_ID = 0


class CompactVocab:
    """Bijection between a subset of real Kimi ids and compact ids, plus an unknown id."""

    def __init__(self, real_ids: Iterable[int], unk_real_id: int) -> None:
        ordered = sorted(set(real_ids) - {unk_real_id})
        self._real_of_compact: list[int] = [unk_real_id, *ordered]
        self._compact_of_real: dict[int, int] = {
            real: compact for compact, real in enumerate(self._real_of_compact)
        }
        self.unk_real_id = unk_real_id

    @property
    def size(self) -> int:
        return len(self._real_of_compact)

    @property
    def real_ids(self) -> list[int]:
        """Real id of each compact id, in compact order (index 0 is the unknown token)."""
        return list(self._real_of_compact)

    def to_compact(self, real_ids: Iterable[int]) -> list[int]:
        return [self._compact_of_real.get(int(i), UNK_COMPACT_ID) for i in real_ids]

    def to_real(self, compact_ids: Sequence[int]) -> list[int]:
        return [self._real_of_compact[int(i)] for i in compact_ids]

    def save(self, path: str | Path) -> None:
        payload = {"unk_real_id": self.unk_real_id, "real_ids": self._real_of_compact[1:]}
        Path(path).write_text(json.dumps(payload, indent=0) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> CompactVocab:
        payload = json.loads(Path(path).read_text())
        return cls(payload["real_ids"], payload["unk_real_id"])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CompactVocab) and self._real_of_compact == other._real_of_compact

    def __repr__(self) -> str:
        return f"CompactVocab(size={self.size})"
