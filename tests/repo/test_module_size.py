"""The local stack stays readable file by file: a module that grows past `MAX_LINES` is split
along a seam (routes -> requests -> state -> wire, as moto splits a service), not left to grow."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400


def test_no_local_stack_file_is_over_the_line_limit() -> None:
    too_long = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "local_stack").rglob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not too_long, f"split these along a seam (at most {MAX_LINES} lines each): {too_long}"
