"""Notebook 02 tells the cloud path's truth: what the hidden notice says, and no local-only assert.

The mismatched-config cell runs here as the notebook has it, with the two outcomes the real
Sail may give (its check is undocumented): a refusal, or a sample. Only the local stack's
outcome, a refusal, may be asserted. The signed-URL cells show the notice that
`helpers.connect` hides, and the migration cell describes the installed SDKs.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
from types import SimpleNamespace
from typing import Any

import pytest
import sail
import tinker
from tinker.lib.public_interfaces.rest_client import RestClient
from tinker.lib.public_interfaces.training_client import TrainingClient

from helpers.notebook_parameters import resolve
from notebook_ui.display import KNOWN_NOISE
from tests import notebook_source

NOTEBOOK = "02_snapshot_and_serve"


def cell(cell_id: str) -> str:
    return notebook_source.cell(NOTEBOOK, cell_id)


def run_cell(cell_id: str, namespace: dict[str, Any]) -> str:
    """Run a cell's code (top-level awaits included); what it printed."""
    code = compile(cell(cell_id), cell_id, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        pending = eval(code, namespace)  # noqa: S307 - the course's own notebook cell
        if pending is not None:
            asyncio.run(pending)
    return printed.getvalue()


def mismatched_namespace(backend: str, sail_samples: bool) -> dict[str, Any]:
    """The mismatched-config cell's names, with a Sail that refuses or samples."""

    class Completer:
        def __init__(self, **settings: Any) -> None:
            assert settings["adapter_config"]["r"] == 8  # the cell does send the wrong rank

        async def __call__(self, prompt: Any, stop: Any) -> Any:
            if not sail_samples:
                raise sail.InferenceError("Sail response ended with status failed")
            return SimpleNamespace(tokens=[1, 2, 3])

    class Builder:
        def __init__(self, row: dict, renderer: Any, group_size: int) -> None:
            pass

        async def make_envs(self) -> list:
            async def initial_observation() -> tuple:
                return "prompt", [0]

            return [SimpleNamespace(initial_observation=initial_observation)]

    return {
        "sail": SimpleNamespace(SailTokenCompleter=Completer, InferenceError=sail.InferenceError),
        "MathGroupBuilder": Builder,
        "course": SimpleNamespace(
            backend=backend,
            adapter_config={"r": 32},
            model_name="moonshotai/Kimi-K2.6",
            train_rows=[{"question": "q"}],
            renderer=None,
        ),
        "cfg": resolve("02_snapshot_and_serve", max_tokens=8, example_index=0),
        "signed_url": "https://example.invalid/archive",
        "name": "notebook-02",
        "row": {"question": "q"},
    }


@pytest.mark.parametrize("backend", ["local", "cloud"])
def test_a_refusal_is_shown_on_both_backends(backend: str) -> None:
    printed = run_cell("cell-14", mismatched_namespace(backend, sail_samples=False))
    assert printed.startswith("refused: InferenceError: ")


def test_a_cloud_sail_that_samples_anyway_is_shown_not_raised() -> None:
    printed = run_cell("cell-14", mismatched_namespace("cloud", sail_samples=True))
    assert printed == "not refused: Sail sampled 3 tokens with the wrong config\n"


def test_the_local_stack_sampling_with_a_mismatched_config_still_fails() -> None:
    with pytest.raises(AssertionError, match="local stack sampled"):
        run_cell("cell-14", mismatched_namespace("local", sail_samples=True))


def test_the_notice_the_course_hides_is_the_one_notebook_02_prints() -> None:
    notice = RestClient.get_checkpoint_archive_url_from_tinker_path_async.__deprecated__
    assert notice.startswith(KNOWN_NOISE[0]) and "may already reject" in notice
    assert "__deprecated__" in cell("cell-08") and "textwrap.fill(notice" in cell("cell-08")


def test_the_migration_cell_describes_the_installed_sdks_and_the_remedy_text_is_gone() -> None:
    namespace = {
        "training_client": SimpleNamespace(
            save_weights_external_async=TrainingClient.save_weights_external_async
        ),
        "rest_client": SimpleNamespace(
            get_external_weights_urls_async=RestClient.get_external_weights_urls_async
        ),
        "inspect": __import__("inspect"),
        "tinker": tinker,
        "sail": sail,
    }
    printed = run_cell("archive-url-migration", namespace)
    assert "save_weights_external_async(self, name" in printed
    assert "get_external_weights_urls_async(self, tinker_path" in printed
    assert "PermissionDeniedError" in printed


def test_asap_is_refused_for_every_completer() -> None:
    with pytest.raises(sail.InvalidArgumentError):
        sail.tinker.SailTokenCompleter(model="m", max_tokens=1, completion_window="asap")
