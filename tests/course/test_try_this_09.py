"""Notebook 09's first "Try this", second half: `lora_name = None` and
`lora_prefix = "my-team"`, run in this process up to the connect cell (the notebook's own
cells, `tests.try_this_support.run_cells`). The first half, a name Sail refuses, is
tests/long/test_exercises.py's and tests/repo/test_instructor_guide.py's; the bullets
that ship an adapter run in tests/long/test_try_this_09_runs.py."""

from __future__ import annotations

import getpass
import re

from tests.try_this_support import run_cells

# Sail's rule for LoRA names, as the parameters cell states it.
SAIL_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,62}[a-z0-9]")


def test_a_made_up_name_starts_with_the_prefix_and_the_connect_cell_prints_it(local_stack) -> None:
    cells = run_cells(
        "09_ship_the_adapter.ipynb",
        {"lora_name": None, "lora_prefix": "my-team"},
        until="unique_lora_name(cfg.lora_prefix)",
    )
    name = cells.namespace["lora_name"]
    assert f"this notebook's LoRA name on Sail: {name}\n" in cells.printed
    user = re.sub(r"[^a-z0-9-]+", "-", getpass.getuser().lower()).strip("-")[:20].strip("-")
    # The guide's answer: a name like my-team-<user>-1a2b3c4d.
    assert re.fullmatch(rf"my-team-{re.escape(user or 'user')}-[0-9a-f]{{8}}", name), name
    assert SAIL_NAME.fullmatch(name)
