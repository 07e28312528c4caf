"""Worked solutions in orca-math's published answer style, to measure notebook 01's
`final_answer` on: the cloud path's data is orca-math, whose hub copy is out of reach offline."""

from __future__ import annotations

import json
from pathlib import Path

ORCA_STYLE_ANSWERS = Path(__file__).resolve().parent / "orca_style_answers.jsonl"


def orca_format_rows(path: Path = ORCA_STYLE_ANSWERS) -> list[dict[str, str]]:
    """Rows of `question`, `answer` (a worked solution in prose), `final` (the answer it
    arrives at) and `source`: written for the course after orca-math's dataset card, which
    says its answers are GPT-4-Turbo's prose and shows one (steps, LaTeX, a closing sentence
    naming the result); orca-math stores no bare answers. Problems and answers are our own."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
