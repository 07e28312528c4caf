"""The raw HTTP requests the course sends to Sail, and the table of what each one's fields rest on.

The `sail` SDK has no calls for uploading a LoRA, so notebook 09 makes those requests itself,
with the SDK's endpoint and key (`SAIL_API_URL`, `SAIL_API_KEY`). Every request shape the
course sends is in `REQUEST_SHAPES`, each field marked documented (with its source) or
guessed; `tests/repo/test_sdk_drift.py` fails when the course sends a shape or a field that is not
in the table. The local stack accepts exactly these shapes, so on the local backend a guess
always "works": only the cloud can prove one wrong, and then Sail's error names the field.
"""

from __future__ import annotations

import asyncio
import getpass
import io
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from helpers.progress import is_interactive

SAIL_URL_DEFAULT = "https://api.sailresearch.com"
LORAS_PAGE = "Sail docs, LoRAs page (docs.sailresearch.com/loras)"
OPENAI_FILES = "OpenAI's files API, which Sail's LoRA page calls through the openai client"
TINKER_SDK = "tinker RestClient.get_checkpoint_archive_url_from_tinker_path (a signed URL)"


@dataclass(frozen=True)
class Field:
    """One field of a request: where it is documented, or why it is a guess."""

    documented: str | None = None  # the source, when documented
    guess: str | None = None  # why we send it, when not

    def __post_init__(self) -> None:
        assert (self.documented is None) != (self.guess is None), "documented or guessed"


@dataclass(frozen=True)
class RequestShape:
    """A request the course sends: the route's own status, and its body's fields."""

    route: Field
    fields: dict[str, Field]


REQUEST_SHAPES: dict[tuple[str, str], RequestShape] = {
    ("POST", "/v1/files"): RequestShape(
        Field(LORAS_PAGE),
        {"purpose": Field(LORAS_PAGE), "file": Field(LORAS_PAGE)},  # multipart
    ),
    ("POST", "/v1/loras"): RequestShape(
        Field(LORAS_PAGE),
        {
            "name": Field(LORAS_PAGE),
            "supported_models": Field(LORAS_PAGE),
            "config_file_id": Field(guess="the page's excerpt we could read omits the body"),
            "weights_file_id": Field(guess="the page's excerpt we could read omits the body"),
        },
    ),
    ("GET", "/v1/loras/{name}"): RequestShape(Field(LORAS_PAGE), {}),
    ("GET", "/v1/loras"): RequestShape(Field(guess="the list route of an OpenAI-style API"), {}),
    ("DELETE", "/v1/loras/{name}"): RequestShape(
        Field(guess="the delete route of an OpenAI-style API"), {}
    ),
    ("GET", "/v1/files"): RequestShape(Field(OPENAI_FILES), {}),
    ("DELETE", "/v1/files/{id}"): RequestShape(Field(OPENAI_FILES), {}),
    ("GET", "{signed archive URL}"): RequestShape(Field(TINKER_SDK), {}),
}

# Sail's LoRA page lists five validation statuses. The fifth's row was cut off in the copy
# we could read after "unveri"; its spelling is our reading and its meaning is unknown, so
# it is treated as final and not usable.
WAITING = ("pending", "running")
SUCCEEDED = "succeeded"
NOT_USABLE = ("failed", "unverified")
VALIDATION_STATUSES = (*WAITING, SUCCEEDED, *NOT_USABLE)

# A LoRA name is unique in a Sail organisation, which a workshop's attendees share: each
# name carries who made it and a random part, so nobody's create gets 409 or deletes
# another's LoRA.
_NOT_NAME = re.compile(r"[^a-z0-9-]+")

# Uploads: no total timeout (a 9.4 GB adapter takes minutes); instead each file gets one sized
# to it at no less than this rate, and a stalled connection fails after READ_TIMEOUT.
MIN_UPLOAD_BYTES_PER_SECOND = 2 * 1024**2
UPLOAD_OVERHEAD_SECONDS = 60
READ_TIMEOUT_SECONDS = 300


class SailRequestError(Exception):
    """Sail refused a request; the message is Sail's."""


class LoraNotUsable(Exception):
    """A LoRA's validation for a model ended in a status other than `succeeded`."""


def unique_lora_name(prefix: str) -> str:
    """`<prefix>-<user>-<8 random hex>`: Sail's name rule, unique per user and run."""
    user = _NOT_NAME.sub("-", getpass.getuser().lower()).strip("-")[:20].strip("-") or "user"
    return f"{prefix}-{user}-{secrets.token_hex(4)}"  # at most 20 + 1 + 20 + 1 + 8 characters


def check_shape(method: str, route: str, fields: dict[str, Any] | None = None) -> RequestShape:
    """The table's entry for a request, or AssertionError naming what is not in the table."""
    shape = REQUEST_SHAPES.get((method, route))
    assert shape is not None, f"{method} {route} is not in helpers.sail_http.REQUEST_SHAPES"
    unknown = set(fields or {}) - set(shape.fields)
    assert not unknown, f"{method} {route} sends {sorted(unknown)}, not in REQUEST_SHAPES"
    return shape


async def sail_request(
    method: str, route: str, *, path_args: dict[str, str] | None = None, **kwargs: Any
) -> dict:
    """One request to Sail: `route` is the table's, `path_args` fill it in. Raises
    SailRequestError with Sail's own message for a 4xx or 5xx."""
    check_shape(method, route, kwargs.get("json"))
    path = route.format(**(path_args or {}))
    timeout = kwargs.pop("timeout", aiohttp.ClientTimeout(total=READ_TIMEOUT_SECONDS))
    headers = {"Authorization": f"Bearer {os.environ['SAIL_API_KEY']}"}
    url = os.environ.get("SAIL_API_URL", SAIL_URL_DEFAULT) + path
    async with aiohttp.ClientSession(trust_env=True, timeout=timeout) as session:
        async with session.request(method, url, headers=headers, **kwargs) as reply:
            body = await reply.json(content_type=None)
    if reply.status >= 400:
        message = body.get("error", {}).get("message") if isinstance(body, dict) else body
        raise SailRequestError(f"HTTP {reply.status} from {method} {path}: {message}")
    return body


class _CountingReader(io.BufferedReader):
    """A file that reports how much of it has been read (aiohttp streams it in chunks)."""

    def __init__(self, path: Path, progress: Any) -> None:
        super().__init__(io.FileIO(path, "rb"))
        self._progress = progress

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self._progress.update(len(data))
        return data


async def upload_file(path: Path, purpose: str = "lora") -> str:
    """POST /v1/files, streamed from disk with a progress bar; returns the file's id."""
    size = path.stat().st_size
    total = UPLOAD_OVERHEAD_SECONDS + size / MIN_UPLOAD_BYTES_PER_SECOND  # sized to the file
    timeout = aiohttp.ClientTimeout(total=total, sock_read=READ_TIMEOUT_SECONDS)
    bar = _progress_bar(size, f"upload {path.name}")
    form = aiohttp.FormData()
    form.add_field("purpose", purpose)
    started = time.monotonic()
    with _CountingReader(path, bar) as content:
        form.add_field("file", content, filename=path.name)
        uploaded = await sail_request("POST", "/v1/files", data=form, timeout=timeout)
    bar.close()
    print(
        f"uploaded {path.name}: {uploaded['id']} ({uploaded['bytes']:,} bytes in "
        f"{time.monotonic() - started:.1f} s; timeout was {timeout.total:,.0f} s)"
    )
    return uploaded["id"]


async def create_lora(name: str, model: str, config_file_id: str, weights_file_id: str) -> dict:
    """POST /v1/loras: a named LoRA from the two uploaded files, for `model`."""
    body = {
        "name": name,
        "supported_models": [model],
        "config_file_id": config_file_id,
        "weights_file_id": weights_file_id,
    }
    return await sail_request("POST", "/v1/loras", json=body)


async def wait_for_validation(name: str, model: str, timeout_seconds: float = 3600) -> dict:
    """Poll GET /v1/loras/{name} until `model`'s validation is final; returns its record if it
    succeeded, and raises LoraNotUsable (with Sail's reason) for any other final status.

    Polls after 0.1 s, then twice as long each time, up to every 10 s."""
    started, last, poll_seconds = time.monotonic(), None, 0.1
    while True:
        lora = await sail_request("GET", "/v1/loras/{name}", path_args={"name": name})
        records = [v for v in lora["validations"] if v["model"] == model]
        if not records:
            raise LoraNotUsable(f"LoRA {name!r} has no validation for {model!r}")
        record = records[0]
        status = record["status"]
        if status != last:
            print(f"{time.monotonic() - started:7.1f} s  {status}")
            last = status
        if status == SUCCEEDED:
            return record
        if status in NOT_USABLE or status not in VALIDATION_STATUSES:
            reason = f"{record.get('result_code')}: {record.get('result_message')}"
            known = "" if status in VALIDATION_STATUSES else " (a status Sail's docs do not list)"
            raise LoraNotUsable(f"LoRA {name!r} is {status!r}{known} for {model}: {reason}")
        if time.monotonic() - started > timeout_seconds:
            raise TimeoutError(f"{name} still {status} after {timeout_seconds} s")
        await asyncio.sleep(poll_seconds)
        poll_seconds = min(2 * poll_seconds, 10.0)


def _progress_bar(total: int, desc: str) -> Any:
    """A byte-counting bar in JupyterLab; a line per tenth elsewhere (papermill keeps logs)."""
    if is_interactive():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="B", unit_scale=True)
    return _LineBar(total, desc)


class _LineBar:
    """Progress as a line at each further tenth of the file."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.done, self.tenths = max(total, 1), desc, 0, 0

    def update(self, count: int) -> None:
        self.done += count
        tenths = min(10, self.done * 10 // self.total)
        if tenths > self.tenths and tenths < 10:
            print(f"{self.desc}: {tenths * 10}%")
        self.tenths = tenths

    def close(self) -> None:
        pass
