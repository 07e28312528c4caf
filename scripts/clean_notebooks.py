"""Store the notebooks the way JupyterLab saves them, without outputs: `make clean-notebooks`.

When a notebook's kernel starts, JupyterLab writes the kernelspec (name, display name,
language) and the kernel's `language_info` into the notebook's metadata. If those differ
from what the file holds, the notebook is marked modified the moment it opens, and
autosave then writes it back, outputs and all. So the notebooks are stored with exactly
the metadata this environment's kernel reports, and with no outputs, execution counts or
saved widget state.

`python scripts/clean_notebooks.py` rewrites the notebooks that differ (only their
metadata, outputs and execution counts; cell sources are never touched).
`--check` changes nothing: it names each notebook that differs, and exits 1 if any does.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import nbformat
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import start_new_kernel

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
KERNEL_NAME = "python3"
KERNEL_INFO_TIMEOUT_SECONDS = 60


def kernel_metadata(kernel_name: str = KERNEL_NAME) -> dict:
    """The notebook metadata JupyterLab writes for this kernel: the kernelspec as the
    kernelspec API gives it, and `language_info` from a live kernel's `kernel_info` reply."""
    spec = KernelSpecManager().get_kernel_spec(kernel_name)
    # With CurveZMQ keys from the manager, the kernel has no reason to warn that it is not.
    manager, client = start_new_kernel(kernel_name=kernel_name, transport_encryption="auto")
    try:
        reply = client.kernel_info(reply=True, timeout=KERNEL_INFO_TIMEOUT_SECONDS)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    kernelspec = {"display_name": spec.display_name, "language": spec.language}
    return {
        "kernelspec": {**kernelspec, "name": kernel_name},
        "language_info": reply["content"]["language_info"],
    }


def cleaned(path: Path, metadata: dict) -> str:
    """The notebook's text as it should be stored (nbformat's writer, which JupyterLab's
    server uses to save: one-space indent, sorted keys, a final newline)."""
    nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    nb.metadata.update(metadata)
    nb.metadata.pop("widgets", None)  # saved widget state: an output by another name
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    text = nbformat.writes(nb, version=nbformat.NO_CONVERT)
    return text if text.endswith("\n") else text + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if dirty")
    args = parser.parse_args()
    metadata = kernel_metadata()
    dirty = [path for path in NOTEBOOKS if cleaned(path, metadata) != path.read_text()]
    for path in dirty:
        if args.check:
            print(f"{path.relative_to(ROOT)}: has outputs or metadata JupyterLab would change")
        else:
            path.write_text(cleaned(path, metadata))
            print(f"{path.relative_to(ROOT)}: cleaned")
    if args.check and dirty:
        print("run `make clean-notebooks` to fix")
    return 1 if args.check and dirty else 0


if __name__ == "__main__":
    sys.exit(main())
