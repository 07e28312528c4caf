"""What `backend="cloud"` needs that this machine lacks, answered locally, for kernels that
rehearse the cloud path against the local stack.

The SDKs' base URLs and keys come from the environment (`start_local_stack` points them at
the stack, with its fake keys). What remains out of reach here: orca-math (the Hugging Face
hub), the Kimi K2.6 tokenizer's remote code, Kimi K2.6's weights index (for notebook 09's
conversion, whose disk and memory checks then measure the tiny archive), and Sailboxes.
`use_local_stand_ins` supplies all four in-process, so a notebook's own code runs unchanged;
a kernel loads them first through an IPython startup file (`write_kernel_startup`).
"""

from __future__ import annotations

from pathlib import Path

KERNEL_STARTUP = "from scripts.cloud_stand_ins import use_local_stand_ins\nuse_local_stand_ins()\n"


def use_local_stand_ins() -> None:
    """orca-math rows, the Kimi tokenizer, the base model's files and Sailboxes, answered
    by this machine."""
    import datasets
    import huggingface_hub

    import helpers.backend as backend
    from kimi import register_offline_kimi_tokenizer
    from local_stack.client.dataset import arithmetic_dataset
    from local_stack.client.sailbox.sailbox_core import install_local_sailboxes

    rows = datasets.concatenate_datasets(list(arithmetic_dataset().values()))
    # orca-math has 200k rows; the cloud path takes its first 2,200.
    backend.load_dataset = lambda name, split: datasets.concatenate_datasets([rows, rows])
    register_offline_kimi_tokenizer()  # get_tokenizer checks this registry first
    install_local_sailboxes()
    # The adapter a cloud-path run converts is the local model's, so the stand-in for the
    # base model (`helpers.shipping.cloud_base_model_dir`) gets the tiny model's files.
    huggingface_hub.hf_hub_download = _tiny_model_file
    # So the room notebook 09 checks for before converting is the tiny archive's too: Kimi
    # K2.6's (about 55 GB of memory) would stop the rehearsal on any ordinary machine.
    import helpers.shipping as shipping

    check_disk, check_memory = shipping.check_free_disk, shipping.check_free_memory
    shipping.check_free_disk = lambda directory, _: check_disk(directory, _tiny_archive())
    shipping.check_free_memory = lambda _, available=None: check_memory(_tiny_archive(), available)


def _tiny_archive() -> object:
    """The size of a tiny-model archive with every layer the course's adapter config targets."""
    import json

    from helpers.backend import tiny_base_model
    from helpers.shipping import estimate_tiny_llama

    adapter = json.loads(
        (Path(__file__).resolve().parents[1] / "tinker_adapter_config.json").read_text()
    )
    config = tiny_base_model()[0].config.to_dict()
    return estimate_tiny_llama(config, adapter["r"], adapter["target_modules"])


def _tiny_model_file(repo_id: str, filename: str, **_: object) -> str:
    import json
    import tempfile

    from helpers.backend import tiny_base_model

    directory = Path(tempfile.mkdtemp())
    model = tiny_base_model()[0]
    model.save_pretrained(directory)
    names = {name: "model.safetensors" for name in model.state_dict()}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": names}))
    return str(directory / filename)


def write_kernel_startup(ipython_dir: Path) -> Path:
    """An IPython folder whose kernels load the stand-ins first; set IPYTHONDIR to it."""
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-cloud-stand-ins.py").write_text(KERNEL_STARTUP)
    return ipython_dir
