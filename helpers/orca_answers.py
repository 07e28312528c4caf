"""Worked solutions in orca-math's published answer style, to measure notebook 01's
`final_answer` on (the cloud path's data is orca-math; its hub copy is out of reach offline)."""

from __future__ import annotations

import json
from pathlib import Path

# Worked solutions in orca-math's published answer style, each with the answer it arrives at
# and where its style (or its problem) comes from: see `orca_format_rows`.
ORCA_STYLE_ANSWERS = Path(__file__).resolve().parent / "orca_style_answers.jsonl"


def orca_format_rows(path: Path = ORCA_STYLE_ANSWERS) -> list[dict[str, str]]:
    """Rows in orca-math's answer format, to measure `final_answer` on: `question`, `answer`
    (a worked solution in prose), `final` (the answer it arrives at) and `source`.

    orca-math stores no bare answers, and its hub copy is out of reach offline, so these are
    written for the course from its dataset card (huggingface.co/datasets/microsoft/orca-math-
    word-problems-200k): the card says its answers are GPT-4-Turbo's prose, and its one
    example row shows the style (steps, LaTeX equations, a closing sentence naming the
    result). Each row's `source` says which it follows; problems and answers are our own.
    """
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
