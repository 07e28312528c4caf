"""pytest survives a failing test whose garbage raises in finalizers (tests/ast_guard_support.py).

The failing test below is run in its own pytest process: while pytest parses source to show the
failure, a collection runs finalizers that raise, and pytest formats those errors, parsing again.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAILS_AMID_RAISING_FINALIZERS = """
import gc


class Raises:
    def __init__(self):
        self.me = self  # a cycle: freed by a collection, not at once

    def __del__(self):
        Raises()  # garbage for the next collection
        raise RuntimeError("closed")  # as a client whose event loop is gone


def test_fails_amid_garbage():
    gc.set_threshold(50)  # collections during pytest's own parsing
    Raises()
    assert 1 == 2
"""


def run_pytest(folder: Path, guarded: bool) -> str:
    (folder / "test_fails.py").write_text(FAILS_AMID_RAISING_FINALIZERS)
    guard = "from tests.ast_guard_support import guard_ast_parse\n\nguard_ast_parse()\n"
    (folder / "conftest.py").write_text(guard if guarded else "")
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result.stdout + result.stderr


def test_a_failure_amid_raising_finalizers_is_reported_not_an_internal_error(tmp_path):
    output = run_pytest(tmp_path, guarded=True)
    assert "INTERNALERROR" not in output
    assert "1 failed" in output and "assert 1 == 2" in output


@pytest.mark.skipif(sys.version_info >= (3, 11, 8), reason="gh-106905 is fixed in 3.11.8")
def test_without_the_guard_this_python_fails_internally(tmp_path):
    """The scenario above is the bug: unguarded, this interpreter's pytest dies on it."""
    assert "SystemError: AST constructor recursion depth mismatch" in run_pytest(
        tmp_path, guarded=False
    )
