"""Tinker archives in Tinker's own layout, their conversion, and notebook 09's shipping helpers.

The local Tinker writes what the cookbook's `build_lora_adapter` converts from; the converted
files are PEFT's own (tensor for tensor what PEFT saves for the same model); the local Sail
builds the same adapter from the archive; `/v1/loras` refuses the raw archive's files. The
helpers notebook 09 ships with are checked piece by piece: the size estimate, the disk check,
the upload's timeout, unique names, all five validation statuses, the request table.
"""

from __future__ import annotations

import ast
import asyncio
import io
import json
import re
import tarfile
from pathlib import Path

import peft
import pytest
import torch
from safetensors.torch import load as load_bytes
from safetensors.torch import load_file
from tinker_cookbook.weights import build_lora_adapter

from helpers import shipping
from helpers.backend import local_base_model_dir
from helpers.errors import CourseConfigError
from helpers.shipping import check_free_disk, estimate_tiny_llama
from kimi.adapter_size import ArchiveEstimate, estimate_kimi_k26
from local_stack.engine.model import (
    ADAPTER_CONFIG_PATH,
    BASE_MODEL_NAME,
    adapter_config_for,
    load_base_model,
)
from local_stack.engine.tinker_layout import PEFT_UNEMBED, TINKER_UNEMBED
from local_stack.engine.trainer import LoraTrainer
from local_stack.sail.adapters import peft_files_from_archive
from tests.notebook_source import code_cells
from tests.sail_support import HTTP, KEY_HEADER

COURSE_CONFIG = json.loads(ADAPTER_CONFIG_PATH.read_text())
RANK = 8


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[LoraTrainer, Path]:
    """A trainer whose LoRA has random non-zero weights, saved as the stack saves checkpoints."""
    base, vocab = load_base_model()
    config = adapter_config_for(RANK)
    config.init_lora_weights = False
    trainer = LoraTrainer(base, vocab, config, seed=3)
    directory = tmp_path_factory.mktemp("tinker-checkpoint")
    trainer.save(directory, with_optimizer=False)
    return trainer, directory


@pytest.fixture(scope="module")
def converted(trained, tmp_path_factory) -> Path:
    _, tinker_dir = trained
    root = tmp_path_factory.mktemp("converted")
    base_dir = local_base_model_dir(root / "base")
    build_lora_adapter(
        base_model=str(base_dir), adapter_path=str(tinker_dir), output_path=str(root / "peft")
    )
    return root / "peft"


def test_checkpoints_are_in_tinkers_layout(trained) -> None:
    _, directory = trained
    assert sorted(p.name for p in directory.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    assert json.loads((directory / "adapter_config.json").read_text()) == {
        "lora_alpha": COURSE_CONFIG["lora_alpha"],
        "r": RANK,
    }
    names = load_file(directory / "adapter_model.safetensors").keys()
    assert f"{TINKER_UNEMBED}lora_A.weight" in names and f"{TINKER_UNEMBED}lora_B.weight" in names
    assert not any(name.startswith(PEFT_UNEMBED) for name in names)  # PEFT's lm_head name
    assert all(name.startswith("base_model.model.model.") for name in names)


def test_build_lora_adapter_gives_exactly_peft_own_adapter(trained, converted) -> None:
    trainer, _ = trained
    expected = peft.get_peft_model_state_dict(trainer.model, save_embedding_layers=False)
    got = load_file(converted / "adapter_model.safetensors")
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    config = json.loads((converted / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM"
    assert (config["r"], config["lora_alpha"]) == (RANK, COURSE_CONFIG["lora_alpha"])
    assert set(config["target_modules"]) == set(COURSE_CONFIG["target_modules"])


def test_local_sail_builds_the_same_adapter_from_the_archive(trained, converted) -> None:
    _, tinker_dir = trained
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for path in sorted(tinker_dir.iterdir()):
            tar.add(path, arcname=path.name)
    given = {**COURSE_CONFIG, "r": RANK}
    files, config = peft_files_from_archive(archive.getvalue(), given)
    assert config == given
    served = load_bytes(files["adapter_model.safetensors"])
    converted_weights = load_file(converted / "adapter_model.safetensors")
    assert served.keys() == converted_weights.keys()
    assert all(torch.equal(served[k], converted_weights[k]) for k in served)


def _upload(url: str, path: Path) -> str:
    fields = {"purpose": "lora", "file": (path.name, path.read_bytes())}
    return HTTP.request("POST", f"{url}/v1/files", fields=fields, headers=KEY_HEADER).json()["id"]


def _validated(url: str, name: str, directory: Path) -> dict:
    ids = [
        _upload(url, directory / n) for n in ("adapter_config.json", "adapter_model.safetensors")
    ]
    body = {
        "name": name,
        "supported_models": [BASE_MODEL_NAME],
        "config_file_id": ids[0],
        "weights_file_id": ids[1],
    }
    created = HTTP.request("POST", f"{url}/v1/loras", json=body, headers=KEY_HEADER)
    assert created.status == 200, created.data
    for _ in range(500):
        lora = HTTP.request("GET", f"{url}/v1/loras/{name}", headers=KEY_HEADER).json()
        [record] = lora["validations"]
        if record["status"] not in shipping.WAITING:
            HTTP.request("DELETE", f"{url}/v1/loras/{name}", headers=KEY_HEADER)
            return record
        asyncio.run(asyncio.sleep(0.02))
    raise AssertionError(f"{name} never finished validating")


def test_uploading_the_raw_archive_fails_validation_and_the_converted_files_pass(
    local_stack, trained, converted, tmp_path
) -> None:
    _, tinker_dir = trained
    raw = _validated(local_stack.url, "raw-tinker-files", tinker_dir)
    assert raw["status"] == "failed" and raw["result_code"] == "invalid_adapter_config", raw
    # Even with a PEFT config beside them, Tinker's tensor names are refused, not half-loaded.
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    config = json.loads((converted / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = BASE_MODEL_NAME
    (mixed / "adapter_config.json").write_text(json.dumps(config))
    (mixed / "adapter_model.safetensors").write_bytes(
        (tinker_dir / "adapter_model.safetensors").read_bytes()
    )
    half = _validated(local_stack.url, "tinker-weights", mixed)
    assert half["status"] == "failed" and half["result_code"] == "adapter_load_failed", half
    assert "unembed_tokens" in half["result_message"]
    (mixed / "adapter_model.safetensors").write_bytes(
        (converted / "adapter_model.safetensors").read_bytes()
    )
    assert _validated(local_stack.url, "converted-files", mixed)["status"] == "succeeded"


# ---------------------------------------------------------------------------------------
# Notebook 09's own code.


def _cells() -> list[str]:
    return [c.source for c in code_cells("09_ship_the_adapter")]


def _cell_with(text: str) -> str:
    [source] = [s for s in _cells() if text in s]
    return source


def _calls(source: str, name: str) -> list[tuple[ast.Call, bool]]:
    """Calls of `name` in `source`, and whether each is inside an `if` on the backend."""
    found = []

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.If) and "backend" in ast.unparse(node.test):
            guarded = True
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith(name):
            found.append((node, guarded))
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(source), False)
    return found


def test_notebook_08_converts_on_both_backends_and_uploads_the_converted_files() -> None:
    export = _cell_with("tinker_dir, peft_dir = ")  # the export cell (not the optional MoE one)
    [(call, guarded)] = _calls(export, "build_lora_adapter")
    assert not guarded, "build_lora_adapter must run on both backends"
    output = next(k.value for k in call.keywords if k.arg == "output_path")
    assert ast.unparse(output) == "str(peft_dir)"
    # The disk check comes before anything is saved or downloaded.
    assert export.index("check_free_disk(") < export.index("save_weights_for_sampler_async")
    assert export.index("check_free_memory(") < export.index("save_weights_for_sampler_async")
    uploads = [c for s in _cells() for c, _ in _calls(s, "upload_file")]
    assert len(uploads) == 2
    for call in uploads:
        assert ast.unparse(call.args[0]).startswith("peft_dir /"), ast.unparse(call)


def test_notebook_08_file_table_shows_whole_descriptions(tmp_path) -> None:
    source = _cell_with("MEANING = {")
    tinker_dir, peft_dir = tmp_path / "tinker", tmp_path / "peft"
    for directory in (tinker_dir, peft_dir):
        directory.mkdir()
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            (directory / name).write_bytes(b"{}")
    import pandas as pd

    from notebook_ui.display import show_tables_whole

    namespace = {"pd": pd, "tinker_dir": tinker_dir, "peft_dir": peft_dir}
    exec(source, namespace)  # noqa: S102 (the notebook's own cell)
    # What connect sets for every notebook, undone afterwards.
    with pd.option_context("display.max_colwidth", 50, "display.html.use_mathjax", True):
        show_tables_whole()
        table = namespace["files"]
        plain, html = repr(table), table._repr_html_()  # what a terminal and JupyterLab show
    assert "mathjax_ignore" in html  # dollar amounts stay text
    meanings = namespace["MEANING"].values()
    assert max(len(m) for m in meanings) > 50  # the pandas default would cut these
    for meaning in meanings:
        assert meaning in plain and meaning in html, meaning


def test_archive_size_estimates(trained) -> None:
    trainer, directory = trained
    config = load_base_model()[0].config.to_dict()
    tiny = estimate_tiny_llama(config, RANK, COURSE_CONFIG["target_modules"])
    assert tiny.parameters == sum(
        t.numel() for t in load_file(directory / "adapter_model.safetensors").values()
    )
    kimi = estimate_kimi_k26(32)
    assert 4.5e9 < kimi.parameters < 5.0e9  # the issue's ~4.7 billion, ~9.4 GB in bf16
    assert kimi.archive_bytes == 2 * kimi.parameters
    assert tiny.export_bytes == tiny.archive_bytes  # a dense model's export is its archive


def test_disk_check_refuses_in_one_sentence(tmp_path) -> None:
    import shutil

    free = shutil.disk_usage(tmp_path).free
    assert check_free_disk(tmp_path, ArchiveEstimate(1, 1024, "tiny")) > 1024
    with pytest.raises(CourseConfigError) as refused:
        check_free_disk(tmp_path, ArchiveEstimate(1, free, "too big"))
    message = str(refused.value)
    assert "GB free" in message and message.count(". ") == 0 and message.endswith(".")


def test_upload_timeout_grows_with_the_file(monkeypatch, tmp_path) -> None:
    big = tmp_path / "adapter_model.safetensors"
    with big.open("wb") as out:  # sparse: 9.5 GB that takes no disk
        out.truncate(9_500_000_000)
    seen = {}

    async def fake_request(method, route, **kwargs):
        seen.update(kwargs, method=method, route=route)
        return {"id": "file-1", "bytes": big.stat().st_size}

    monkeypatch.setattr(shipping, "sail_request", fake_request)
    assert asyncio.run(shipping.upload_file(big)) == "file-1"
    assert (seen["method"], seen["route"]) == ("POST", "/v1/files")
    timeout = seen["timeout"]
    assert timeout.total >= 9_500_000_000 / shipping.MIN_UPLOAD_BYTES_PER_SECOND
    assert timeout.sock_read == shipping.READ_TIMEOUT_SECONDS


def test_upload_streams_to_the_local_stack(local_stack, tmp_path, capsys) -> None:
    path = tmp_path / "adapter_config.json"
    path.write_text(json.dumps(COURSE_CONFIG))
    file_id = asyncio.run(shipping.upload_file(path))
    assert f"uploaded adapter_config.json: {file_id} ({path.stat().st_size:,} bytes" in (
        capsys.readouterr().out
    )
    deleted = asyncio.run(
        shipping.sail_request("DELETE", "/v1/files/{id}", path_args={"id": file_id})
    )
    assert deleted["deleted"] is True


def test_lora_names_are_unique_per_user_and_run(monkeypatch) -> None:
    monkeypatch.setattr(shipping.getpass, "getuser", lambda: "Ada.Lovelace" * 5)
    names = {shipping.unique_lora_name("a" * 20) for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert re.fullmatch(r"[a-z0-9][a-z0-9-]{0,62}[a-z0-9]", name), name
        assert name.startswith("a" * 20 + "-ada-lovelace")
    assert shipping.unique_lora_name("course").startswith("course-")


@pytest.mark.parametrize(
    ("statuses", "outcome"),
    [
        (["pending", "running", "succeeded"], "succeeded"),
        (["pending", "failed"], "is 'failed' for"),
        (["running", "unverified"], "is 'unverified' for"),
        (["pending", "exploded"], "a status Sail's docs do not list"),
    ],
)
def test_every_validation_status_is_handled(monkeypatch, statuses, outcome) -> None:
    assert len(shipping.VALIDATION_STATUSES) == 5  # as Sail's LoRA page lists them
    replies = iter(statuses)

    async def fake_request(method, route, **kwargs):
        assert (method, route) == ("GET", "/v1/loras/{name}")
        status = next(replies)
        record = {"model": "m", "status": status, "result_code": "why", "result_message": "so"}
        return {"validations": [record]}

    async def no_sleep(_):
        return None

    monkeypatch.setattr(shipping, "sail_request", fake_request)
    monkeypatch.setattr(shipping.asyncio, "sleep", no_sleep)
    if outcome == "succeeded":
        assert asyncio.run(shipping.wait_for_validation("x", "m"))["status"] == "succeeded"
    else:
        with pytest.raises(shipping.LoraNotUsable, match=re.escape(outcome)):
            asyncio.run(shipping.wait_for_validation("x", "m"))


def test_request_table_marks_every_field() -> None:
    for shape in shipping.REQUEST_SHAPES.values():
        for spec in (shape.route, *shape.fields.values()):
            assert (spec.documented is None) != (spec.guess is None)
    create = shipping.REQUEST_SHAPES[("POST", "/v1/loras")].fields
    assert create["config_file_id"].guess and create["weights_file_id"].guess
    with pytest.raises(AssertionError, match="not in REQUEST_SHAPES"):
        shipping.check_shape("POST", "/v1/loras", {"name": "x", "adapter_file": "y"})
