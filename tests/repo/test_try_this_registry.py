"""Every "Try this" bullet of every notebook names the tests that execute it
(`tests.try_this_support.TRY_THIS`), and those tests exist. Read from the files, nothing run."""

from __future__ import annotations

import pytest

from tests.try_this_support import NOTEBOOKS, ROOT, TRY_THIS, defined_tests, try_this_bullets

NOTEBOOK_NAMES = sorted(path.stem for path in NOTEBOOKS.glob("[0-9][0-9]*_*.ipynb"))


def test_the_registry_covers_the_notebooks_and_nothing_else() -> None:
    assert sorted(TRY_THIS) == NOTEBOOK_NAMES


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_every_bullet_has_exactly_one_entry_and_every_entry_one_bullet(name: str) -> None:
    bullets = try_this_bullets(NOTEBOOKS / f"{name}.ipynb")
    assert bullets, f"{name} has no 'Try this' bullets"
    entries = TRY_THIS.get(name, {})
    for bullet in bullets:
        named_by = [phrase for phrase in entries if phrase in bullet]
        assert len(named_by) == 1, (
            f"{name}'s bullet {bullet[:70]!r}... is named by {named_by} in "
            "tests/try_this_support.py's TRY_THIS; give it one phrase and the tests that run it"
        )
    for phrase in entries:
        matching = [bullet for bullet in bullets if phrase in bullet]
        assert len(matching) == 1, f"TRY_THIS[{name!r}][{phrase!r}] names {len(matching)} bullets"


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_every_named_test_exists(name: str) -> None:
    for phrase, node_ids in TRY_THIS.get(name, {}).items():
        assert node_ids, f"TRY_THIS[{name!r}][{phrase!r}] names no test"
        for node_id in node_ids:
            path, _, test = node_id.partition("::")
            assert (ROOT / path).is_file(), f"{node_id}: no file {path}"
            assert test.split("[")[0] in defined_tests(ROOT / path), f"{node_id}: no such test"


def test_a_missing_test_would_be_caught(tmp_path) -> None:
    """The existence check parses test files: it sees module-level and class tests only."""
    module = tmp_path / "test_x.py"
    module.write_text(
        "def test_a():\n    assert True\n\n\ndef helper():\n    pass\n\n\n"
        "class TestB:\n    def test_c(self):\n        assert True\n"
    )
    assert defined_tests(module) == {"test_a", "TestB::test_c"}
