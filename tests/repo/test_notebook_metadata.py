"""Opening a notebook in JupyterLab does not modify it.

When a notebook's kernel starts, JupyterLab sets the notebook's `kernelspec` and
`language_info` to what the kernelspec and the kernel report, and marks the notebook
modified if that changed anything. This test plays JupyterLab's part with the real pieces:
the Jupyter server's contents manager loads the notebook, the metadata a live kernel of
this environment reports is set as JupyterLab sets it, and the contents manager saves it
back. The bytes on disk must not change.

If it fails on `language_info.version` alone, this Python's patch version differs from the
one the notebooks were stored with: `make clean-notebooks` stores this one.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from jupyter_server.services.contents.filemanager import FileContentsManager

from scripts.clean_notebooks import NOTEBOOKS, kernel_metadata


@pytest.fixture(scope="module")
def jupyterlab_metadata() -> dict:
    return kernel_metadata()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opening_and_saving_in_jupyterlab_changes_nothing(
    path: Path, jupyterlab_metadata: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "data"))  # the server's trust db
    shutil.copy(path, tmp_path / path.name)
    contents = FileContentsManager(root_dir=str(tmp_path))
    model = contents.get(path.name)
    stored = {key: model["content"]["metadata"].get(key) for key in jupyterlab_metadata}
    model["content"]["metadata"].update(jupyterlab_metadata)
    contents.save({"type": "notebook", "content": model["content"]}, path.name)
    assert stored == jupyterlab_metadata
    assert (tmp_path / path.name).read_bytes() == path.read_bytes()
