"""Shipping an adapter: Sail's LoRA upload flow on the local stack, and notebook 09.

The upload routes are driven over HTTP as Sail's documentation drives them (the SDK has no
calls for them), and sampling by name through the real `sail.SailTokenCompleter(lora=...)`.
Every refusal is checked for its status, message, `param` and `code`, and hostile uploads
run alongside well-formed sampling that must keep its exact logprobs.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path

import pytest
import sail

from helpers.errors import CourseConfigError
from helpers.notebook_parameters import resolve
from local_stack.engine.model import ADAPTER_CONFIG_PATH, BASE_MODEL_NAME, load_base_model
from local_stack.sail.adapter_archive import MAX_ARCHIVE_BYTES
from local_stack.sail.loras import MAX_CLIENT_LORAS
from tests.params_support import NOTEBOOKS as PARAMETER_TABLE
from tests.sail_support import (
    ADAPTER_FILES,
    HTTP,
    KEY_HEADER,
    QUESTIONS,
    alongside_good_requests,
    assert_logprobs_match,
    load_adapter,
    make_completer,
    sample,
    save_adapter,
)

NOTEBOOK = "09_ship_the_adapter.ipynb"
COURSE_CONFIG = json.loads(ADAPTER_CONFIG_PATH.read_text())


# ---------------------------------------------------------------------------------------
# Raw HTTP, as Sail's LoRA page does it.


def upload(url: str, name: str, data: bytes, purpose: str = "lora", key: str | None = None):
    headers = KEY_HEADER if key is None else {"Authorization": f"Bearer {key}"}
    fields = {"purpose": purpose, "file": (name, data)}
    return HTTP.request("POST", f"{url}/v1/files", fields=fields, headers=headers)


def upload_ids(url: str, adapter: Path) -> dict[str, str]:
    """Upload an adapter's two files; the create body's two file fields."""
    ids = [upload(url, name, (adapter / name).read_bytes()).json()["id"] for name in ADAPTER_FILES]
    return {"config_file_id": ids[0], "weights_file_id": ids[1]}


def create(url: str, name: str, **fields):
    body = {"name": name, "supported_models": [BASE_MODEL_NAME], **fields}
    return HTTP.request("POST", f"{url}/v1/loras", json=body, headers=KEY_HEADER)


def request(url: str, method: str, path: str):
    return HTTP.request(method, f"{url}/v1{path}", headers=KEY_HEADER)


def wait_for_validation(url: str, name: str) -> tuple[dict, list[str]]:
    """The final validation record, and every status seen on the way."""
    seen, deadline = [], time.monotonic() + 60
    while time.monotonic() < deadline:
        [record] = request(url, "GET", f"/loras/{name}").json()["validations"]
        if not seen or seen[-1] != record["status"]:
            seen.append(record["status"])
        if record["status"] not in ("pending", "running"):
            return record, seen
        time.sleep(0.02)
    raise AssertionError(f"{name} never finished validating: {seen}")


def assert_error(reply, status: int, words: str, *, param: str | None = None, code=None) -> None:
    assert reply.status == status, (reply.status, reply.data[:300])
    error = reply.json()["error"]
    assert words in error["message"], error
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error


@pytest.fixture(scope="module")
def adapter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_adapter(tmp_path_factory.mktemp("adapter"), seed=7)


@pytest.fixture(scope="module")
def adapter_with_config(tmp_path_factory, adapter):
    """`adapter` with its adapter_config.json changed by the given fields."""

    def make(**changes) -> Path:
        directory = tmp_path_factory.mktemp("changed")
        config = {**json.loads((adapter / "adapter_config.json").read_text()), **changes}
        (directory / "adapter_config.json").write_text(json.dumps(config))
        weights = (adapter / "adapter_model.safetensors").read_bytes()
        (directory / "adapter_model.safetensors").write_bytes(weights)
        return directory

    return make


# ---------------------------------------------------------------------------------------
# The flow that works.


def test_uploaded_lora_validates_and_serves_by_name_and_by_id(local_stack, renderer, adapter):
    url = local_stack.url
    ids = upload_ids(url, adapter)
    created = create(url, "served-by-name", **ids)
    assert created.status == 200, created.data
    body = created.json()
    assert body["name"] == "served-by-name" and body["object"] == "lora"
    assert body["validations"] == [
        {"model": BASE_MODEL_NAME, "status": "pending", "result_code": None, "result_message": None}
    ]
    record, seen = wait_for_validation(url, "served-by-name")
    assert record["status"] == "succeeded" and set(seen) <= {"pending", "running", "succeeded"}

    peft_model, (base_model, vocab) = load_adapter(adapter), load_base_model()
    for lora in ("served-by-name", body["id"]):
        results = sample(make_completer(lora=lora), renderer, QUESTIONS)
        for question, result in zip(QUESTIONS, results, strict=True):
            assert_logprobs_match(peft_model, vocab, renderer, question, result)
    with pytest.raises(AssertionError):  # the base model gives these tokens other logprobs
        assert_logprobs_match(base_model, vocab, renderer, QUESTIONS[0], results[0])

    listed = [lora["name"] for lora in request(url, "GET", "/loras").json()["data"]]
    assert "served-by-name" in listed
    deleted = request(url, "DELETE", "/loras/served-by-name").json()
    assert deleted == {
        "id": body["id"],
        "object": "lora",
        "name": "served-by-name",
        "deleted": True,
    }
    assert_error(
        request(url, "GET", "/loras/served-by-name"), 404, "no LoRA", code="lora_not_found"
    )
    with pytest.raises(sail.InferenceError, match="no LoRA named"):
        sample(make_completer(lora="served-by-name"), renderer, QUESTIONS[:1])
    for file_id in ids.values():
        assert request(url, "DELETE", f"/files/{file_id}").json()["deleted"] is True
        assert_error(
            request(url, "GET", f"/files/{file_id}"), 404, "no file", code="file_not_found"
        )


def test_a_lora_keeps_its_files_after_they_are_deleted(local_stack, renderer, adapter):
    url = local_stack.url
    ids = upload_ids(url, adapter)
    assert create(url, "keeps-its-files", **ids).status == 200
    for file_id in ids.values():
        request(url, "DELETE", f"/files/{file_id}")
    assert wait_for_validation(url, "keeps-its-files")[0]["status"] == "succeeded"
    sample(make_completer(lora="keeps-its-files"), renderer, QUESTIONS[:1])
    request(url, "DELETE", "/loras/keeps-its-files")


# ---------------------------------------------------------------------------------------
# Validation failures: documented as failing validation (or inference), not the create.


@pytest.mark.parametrize(
    ("changes", "code", "words"),
    [
        ({"base_model_name_or_path": "moonshotai/Kimi-K2.5"}, "base_model_mismatch", "K2.5"),
        ({"r": 64}, "invalid_rank", "from 1 to 32"),
        ({"peft_type": "IA3"}, "invalid_adapter_config", "LORA"),
    ],
    ids=["wrong-base-model", "rank-over-the-limit", "not-a-lora"],
)
def test_validation_fails_with_a_result_code(
    local_stack, renderer, adapter_with_config, changes, code, words
):
    url, name = local_stack.url, f"fails-{code.replace('_', '-')}"
    assert create(url, name, **upload_ids(url, adapter_with_config(**changes))).status == 200
    record, seen = wait_for_validation(url, name)
    assert record["status"] == "failed" and seen[-1] == "failed"
    assert record["result_code"] == code and words in record["result_message"]
    with pytest.raises(sail.InferenceError, match="is not validated"):
        sample(make_completer(lora=name), renderer, QUESTIONS[:1])
    raw = HTTP.request(
        "POST",
        f"{url}/v1/responses",
        json={"model": BASE_MODEL_NAME, "raw_prompt_tokens": [163594], "metadata": {"lora": name}},
        headers=KEY_HEADER,
    )
    assert_error(raw, 400, "failed", param="metadata.lora", code="lora_not_validated")
    request(url, "DELETE", f"/loras/{name}")


def test_a_rank_64_adapter_fails_validation(local_stack, tmp_path):
    url = local_stack.url
    ids = upload_ids(url, save_adapter(tmp_path, seed=1, rank=64))
    assert create(url, "real-rank-64", **ids).status == 200
    record, _ = wait_for_validation(url, "real-rank-64")
    assert (record["status"], record["result_code"]) == ("failed", "invalid_rank")
    request(url, "DELETE", "/loras/real-rank-64")


# ---------------------------------------------------------------------------------------
# Refused at create: names, models, files.

BAD_NAMES = ["a", "A1", "my_lora", "-ab", "ab-", "a b", "a" * 65, "ab/cd", "", 7, None]


def test_name_rules_and_duplicates(local_stack, adapter):
    url = local_stack.url
    ids = upload_ids(url, adapter)
    for name in BAD_NAMES:
        assert_error(create(url, name, **ids), 400, "2-64", param="name", code="invalid_name")
    for name in ("ab", "a" * 64, "0-lora-9"):
        assert create(url, name, **ids).status == 200, name
        assert_error(create(url, name, **ids), 409, "already exists", code="duplicate_name")
        request(url, "DELETE", f"/loras/{name}")
        assert_error(request(url, "GET", f"/loras/{name}"), 404, "no LoRA")


@pytest.mark.parametrize(
    ("models", "code"),
    [
        (["moonshotai/Kimi-K2.5"], "unknown_model"),
        (["no-such/model"], "unknown_model"),
        ([], None),
        ("moonshotai/Kimi-K2.6", None),
        ([5], None),
    ],
)
def test_supported_models_must_be_known(local_stack, adapter, models, code):
    url = local_stack.url
    reply = create(url, "models", **upload_ids(url, adapter), supported_models=models)
    assert_error(reply, 400, "supported_models", param="supported_models", code=code)


def test_missing_files_are_refused(local_stack, adapter):
    url = local_stack.url
    ids = upload_ids(url, adapter)
    for field in ids:
        without = {k: v for k, v in ids.items() if k != field}
        assert_error(create(url, "x1", **without), 400, "missing", param=field, code="missing_file")
    unknown = {**ids, "config_file_id": "file-nope"}
    assert_error(create(url, "x1", **unknown), 404, "no file", param="config_file_id")
    request(url, "DELETE", f"/files/{ids['weights_file_id']}")
    assert_error(create(url, "x1", **ids), 404, "no file", param="weights_file_id")
    same = {**ids, "weights_file_id": ids["config_file_id"]}
    assert_error(create(url, "x1", **same), 400, "same file", code="missing_file")
    assert_error(request(url, "GET", "/loras/x1"), 404, "no LoRA")


def test_lora_count_is_bounded(local_stack, adapter):
    url = local_stack.url
    ids = upload_ids(url, adapter)
    names = [f"bounded-{i}" for i in range(MAX_CLIENT_LORAS)]
    for name in names:
        assert create(url, name, **ids).status == 200
    assert_error(create(url, "one-too-many", **ids), 413, "at most", code="too_many_loras")
    for name in names:
        request(url, "DELETE", f"/loras/{name}")


# ---------------------------------------------------------------------------------------
# Hostile uploads: refused with a 4xx while sampling goes on untouched.


def _raw_post(url: str, data: bytes, content_type: str):
    headers = {**KEY_HEADER, "Content-Type": content_type}
    return HTTP.request("POST", f"{url}/v1/files", body=data, headers=headers)


UPLOAD_REFUSALS = [
    (lambda url: upload(url, "a.json", b"{}", purpose="fine-tune"), 400, "purpose"),
    (lambda url: upload(url, "a.json", b"{}", purpose=""), 400, "purpose"),
    (lambda url: upload(url, "a.json", b"{}", key="sk_wrong"), 401, "API key"),
    (lambda url: upload(url, "big.bin", b"\0" * (MAX_ARCHIVE_BYTES + 1)), 413, "larger than"),
    (lambda url: upload(url, "../x.json", b"{}"), 400, "plain file name"),
    (lambda url: _raw_post(url, b'{"purpose": "lora"}', "application/json"), 415, "multipart"),
    (lambda url: _raw_post(url, b"--x\r\nnot a part", "multipart/form-data"), 400, "malformed"),
    (
        lambda url: HTTP.request(
            "POST", f"{url}/v1/files", fields={"purpose": "lora"}, headers=KEY_HEADER
        ),
        400,
        "no `file`",
    ),
    (
        lambda url: HTTP.request(
            "POST",
            f"{url}/v1/files",
            fields={"purpose": "lora", "file": ("a", b"1"), "extra": "x"},
            headers=KEY_HEADER,
        ),
        400,
        "unexpected form field",
    ),
    (lambda url: request(url, "GET", "/files/file-nope"), 404, "no file"),
    (lambda url: request(url, "DELETE", "/loras/nope"), 404, "no LoRA"),
]


def test_hostile_uploads_are_4xx_and_affect_nothing_else(local_stack, renderer, base):
    model, vocab = base
    url = local_stack.url
    before = request(url, "GET", "/files").json()["data"]
    calls = [functools.partial(call, url) for call, _, _ in UPLOAD_REFUSALS]
    replies = alongside_good_requests(renderer, make_completer(), model, vocab, calls)
    for (_, status, words), reply in zip(UPLOAD_REFUSALS, replies, strict=True):
        assert_error(reply, status, words)
    assert request(url, "GET", "/files").json()["data"] == before  # nothing refused was kept


def test_file_storage_is_bounded_and_refuses_instead_of_evicting(local_stack):
    url = local_stack.url
    big = b"\1" * MAX_ARCHIVE_BYTES
    kept = []
    while (reply := upload(url, "big.bin", big)).status == 200:
        kept.append(reply.json()["id"])
        assert len(kept) <= 64, "the store never filled up"
    assert_error(reply, 413, "storage is full", code="storage_full")
    assert all(request(url, "GET", f"/files/{i}").status == 200 for i in kept)
    for file_id in kept:
        request(url, "DELETE", f"/files/{file_id}")
    again = upload(url, "big.bin", big)
    assert again.status == 200
    request(url, "DELETE", f"/files/{again.json()['id']}")


# ---------------------------------------------------------------------------------------
# Notebook 09: its parameter checks (its whole runs under papermill are
# tests/notebooks/test_ship_adapter_runs.py).


@pytest.mark.parametrize(
    ("name", "value", "words"),
    [
        ("lora_name", "Course_Adapter", "lora_name must be 2-64 characters"),
        ("lora_name", "x", "lora_name must be 2-64 characters"),
        ("short_run_steps", 0, "short_run_steps must be a whole number from 1 to 10000"),
        ("parity_problems", 65, "parity_problems must be a whole number from 1 to 64"),
        ("eval_problems", 394, "eval_problems must be a whole number from 1 to 393"),
        ("eval_samples", 65, "eval_samples must be a whole number from 1 to 64"),
        ("max_tokens", 257, "max_tokens must be a whole number from 1 to 256"),
        ("seed", -1, "seed must be a whole number from 0 to 4294967295"),
        ("keep_on_sail", "yes", "keep_on_sail must be one of True, False"),
        ("run_name", "../up", "run_name must be"),
    ],
)
def test_shipping_parameters_are_refused_in_one_sentence(name, value, words):
    valid = PARAMETER_TABLE[NOTEBOOK][0]  # the valid values tests/course/test_params.py checks
    resolve("09_ship_the_adapter", **valid)
    with pytest.raises(CourseConfigError) as raised:
        resolve("09_ship_the_adapter", **{**valid, name: value})
    assert str(raised.value).startswith(words) and str(raised.value).endswith(".")
