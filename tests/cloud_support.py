"""Running a notebook with `backend="cloud"` against a local stack.

The `local_stack` fixture points the real SDKs' URLs and keys at a local server; what the
cloud path still needs and this machine lacks is orca-math (the Hugging Face hub) and the
Kimi tokenizer's remote code. An IPython startup file supplies both locally, so the
notebook itself runs unchanged.
"""

from __future__ import annotations

import os
from pathlib import Path

CLOUD_STAND_INS = """
import datasets
import helpers.backend as backend
from local_stack.dataset import arithmetic_dataset
from kimi import register_offline_kimi_tokenizer

_rows = datasets.concatenate_datasets(list(arithmetic_dataset().values()))
backend.load_dataset = lambda name, split: datasets.concatenate_datasets([_rows, _rows])
register_offline_kimi_tokenizer()


def _tiny_model_file(repo_id, filename, **_):
    # The adapter a cloud-path run converts is the local model's: the stand-in for the
    # base model (`helpers.adapter_export.cloud_base_model_dir`) gets its two small files.
    import json, tempfile
    from pathlib import Path

    import helpers.backend  # (the notebook's `backend` parameter shadows the module name)

    directory = Path(tempfile.mkdtemp())
    model = helpers.backend.tiny_base_model()[0]
    model.save_pretrained(directory)
    names = {name: "model.safetensors" for name in model.state_dict()}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": names}))
    return str(directory / filename)


import huggingface_hub

huggingface_hub.hf_hub_download = _tiny_model_file
"""


def cloud_kernel_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment for a papermill run on the cloud path: the process's own (which the
    `local_stack` fixture pointed at its server), a kernel that loads the stand-ins first,
    runs under `tmp_path/runs`, and `extra`."""
    startup = tmp_path / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-cloud-stand-ins.py").write_text(CLOUD_STAND_INS)
    env = {
        **os.environ,
        "IPYTHONDIR": str(tmp_path / "ipython"),
        "COURSE_RUNS_DIR": str(tmp_path / "runs"),
        **extra,
    }
    env.pop("JPY_SESSION_NAME", None)
    return env
