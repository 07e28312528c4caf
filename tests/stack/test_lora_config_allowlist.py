"""Adapter configs pass an allow-list before PEFT sees any of them.

PEFT matches pattern keys and module lists as regular expressions, and some of its
initialisations run for as long as a config asks: a `{"(.|.)*X": 8}` rank_pattern held the
interpreter lock until the stack froze, and `init_lora_weights: "pissa_niter_100000000"`
blocked the compute thread for good. Both paths a config takes into PEFT are covered (a
Tinker archive named by URL, an uploaded LoRA), and the `tinker_adapter_config` a request
names; each refusal is a 4xx with one sentence, and a bystander is served meanwhile.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import peft
import pytest

from local_stack.engine.model import ADAPTER_CONFIG_PATH, adapter_config_for, load_base_model
from local_stack.http import ApiError
from local_stack.sail.lora_config import INVALID_CONFIG, INVALID_RANK, check_lora_config
from tests import sail_support as support
from tests.isolation_support import assert_bystander_served, new_client, sail, sample_from_lora
from tests.tinker_datums import MODEL

COURSE_CONFIG = json.loads(ADAPTER_CONFIG_PATH.read_text())
BACKTRACKING = "(.|.)*X"
# Each hostile change to the course's config, the code it is refused with, and words of the
# sentence that refuses it.
HOSTILE = {
    "regex rank_pattern": ({"rank_pattern": {BACKTRACKING: 8}}, INVALID_CONFIG, "rank_pattern"),
    "regex alpha_pattern": ({"alpha_pattern": {BACKTRACKING: 8}}, INVALID_CONFIG, "no patterns"),
    "regex exclude_modules": ({"exclude_modules": BACKTRACKING}, INVALID_CONFIG, "plain module"),
    "regex in a module list": ({"exclude_modules": [BACKTRACKING]}, INVALID_CONFIG, "plain"),
    "regex target_modules": ({"target_modules": BACKTRACKING}, INVALID_CONFIG, "target_modules"),
    "regex layers_pattern": ({"layers_pattern": "(a+)+"}, INVALID_CONFIG, "layers_pattern"),
    "endless PiSSA": (
        {"init_lora_weights": "pissa_niter_100000000"},
        INVALID_CONFIG,
        "init_lora_weights must be true, false or 'gaussian'",
    ),
    "LoftQ": ({"init_lora_weights": "loftq"}, INVALID_CONFIG, "init_lora_weights"),
    "unknown key": ({"surprise": 1}, INVALID_CONFIG, "['surprise']"),
    "layer copies": ({"layer_replication": [[0, 100_000]]}, INVALID_CONFIG, "layer_replication"),
    "rank too high": ({"r": 64}, INVALID_RANK, "ranks must be integers from 1 to 32"),
    "huge pattern rank": ({"rank_pattern": {"q_proj": 10**6}}, INVALID_RANK, "ranks must be"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_configs_are_refused_in_one_sentence(case):
    change, code, words = HOSTILE[case]
    with pytest.raises(ApiError) as refused:
        check_lora_config({**COURSE_CONFIG, **change})
    message = str(refused.value)
    assert refused.value.status == 400 and refused.value.code == code
    assert words in message and message.count(". ") == 0, message


def test_the_configs_peft_and_the_course_write_pass():
    """What the stack's own trainer saves (every key PEFT writes), the course's config, and
    plain names in the pattern keys."""
    with tempfile.TemporaryDirectory() as tmp:
        config = adapter_config_for(8)
        peft.get_peft_model(load_base_model()[0], config).save_pretrained(
            tmp, save_embedding_layers=False
        )
        saved = json.loads(Path(tmp, "adapter_config.json").read_text())
    for accepted in (
        saved,
        COURSE_CONFIG,
        {**saved, "rank_pattern": {"q_proj": 4, "model.layers.0.mlp.up_proj": 2}},
        {**saved, "alpha_pattern": {"lm_head": 8.0}, "exclude_modules": ["model.layers.1.v_proj"]},
        {**saved, "init_lora_weights": "gaussian", "layers_to_transform": [0, 1]},
    ):
        check_lora_config(accepted)


def _wait_for_validation(url: str, client: str, name: str) -> dict:
    deadline = time.monotonic() + 60  # only a guard against a hang
    while time.monotonic() < deadline:
        record = sail(url, client, "GET", f"/loras/{name}").json()["validations"][0]
        if record["status"] not in ("pending", "running"):
            return record
        time.sleep(0.1)
    raise AssertionError(f"validation of {name} never ended")


@pytest.mark.parametrize("case", ["regex rank_pattern", "regex exclude_modules", "endless PiSSA"])
def test_an_uploaded_lora_with_a_hostile_config_fails_validation(local_stack, case):
    url, mallory = local_stack.url, new_client("mallory")
    change, code, words = HOSTILE[case]
    config = json.dumps({**COURSE_CONFIG, **change}).encode()
    ids = {}
    for field, filename, data in (
        ("config_file_id", "adapter_config.json", config),
        ("weights_file_id", "adapter_model.safetensors", b"weights"),
    ):
        uploaded = sail(
            url, mallory, "POST", "/files", fields={"purpose": "lora", "file": (filename, data)}
        )
        ids[field] = uploaded.json()["id"]
    body = {"name": "hostile", "supported_models": [MODEL], **ids}
    assert sail(url, mallory, "POST", "/loras", json=body).status == 200
    assert_bystander_served(url)
    record = _wait_for_validation(url, mallory, "hostile")
    assert record["status"] == "failed" and record["result_code"] == code, record
    assert words in record["result_message"], record
    assert sail(url, mallory, "DELETE", "/loras/hostile").status == 200
    for file_id in ids.values():
        assert sail(url, mallory, "DELETE", f"/files/{file_id}").status == 200


@pytest.mark.parametrize("case", ["regex alpha_pattern", "endless PiSSA", "unknown key"])
def test_an_archive_with_a_hostile_config_is_refused(local_stack, tmp_path, case):
    change, _, words = HOSTILE[case]
    weights = support.save_adapter(tmp_path, seed=3) / "adapter_model.safetensors"
    config = json.dumps({**COURSE_CONFIG, **change}).encode()
    archive = support.tar_bytes(
        {"adapter_config.json": config, "adapter_model.safetensors": weights.read_bytes()}
    )
    name = case.replace(" ", "-")
    lora_url = support.plant_archive(local_stack.storage_dir, local_stack.url, name, archive)
    reply = sample_from_lora(local_stack.url, new_client("mallory"), {"lora": lora_url})
    assert_bystander_served(local_stack.url)
    assert reply.status == 400, reply.data[:300]
    error = reply.json()["error"]
    assert words in error["message"] and error["param"] == "metadata.lora", error


def test_a_request_adapter_config_with_unknown_keys_is_refused_before_fetching(local_stack):
    """`tinker_adapter_config` is only compared with the archive's own config, never given
    to PEFT; it too may hold only known keys, and is checked before anything is fetched
    (the URL names no checkpoint: a fetch would have answered HTTP 404)."""
    missing = f"{local_stack.url}/tinker/archives/nobody/sampler_weights/none.tar"
    given = json.dumps({**COURSE_CONFIG, "rank_pattern": {BACKTRACKING: 8}, "surprise": 1})
    lora = {"lora": missing, "tinker_adapter_config": given}
    reply = sample_from_lora(local_stack.url, new_client("mallory"), lora)
    assert reply.status == 400
    error = reply.json()["error"]
    assert error["param"] == "metadata.tinker_adapter_config", error
    assert "['surprise']" in error["message"] and "HTTP 404" not in error["message"]
