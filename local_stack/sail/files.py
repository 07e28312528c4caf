"""Files uploaded with `POST /v1/files` (multipart `file` and `purpose`), as Sail's LoRA
page has them uploaded: `adapter_config.json` and `adapter_model.safetensors`, purpose `lora`.

The bytes stay in memory, within fixed bounds: one file may be as large as the biggest
adapter archive the stack fetches (`adapter_archive.MAX_ARCHIVE_BYTES`), and all files
together at most MAX_STORED_BYTES, of which one client may hold a quarter (so one kernel
filling its share leaves room for the others). An upload over a bound is refused while it
streams, before its bytes are kept; nothing already stored is evicted to make room.

A file belongs to the client that uploaded it (its key, `local_stack.config`): only that
client lists, reads, deletes or builds a LoRA from it. To any other client it does not
exist (404, the same answer as for an id never issued).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import BodyPartReader, web

from local_stack.http import ApiError
from local_stack.sail.adapter_archive import MAX_ARCHIVE_BYTES

PURPOSES = ("lora",)  # the only purpose the local stack stores
MAX_FILE_BYTES = MAX_ARCHIVE_BYTES
MAX_STORED_BYTES = 64 * 1024**2
MAX_STORED_FILES = 256
CLIENT_SHARE = 4  # one client may hold 1/CLIENT_SHARE of the files and bytes
MAX_FILENAME_CHARS = 255
MAX_FIELD_BYTES = 1024  # a form field other than the file (`purpose`)
# Multipart headers and boundaries around the file: generous, still small.
MULTIPART_OVERHEAD_BYTES = 64 * 1024
CHUNK_BYTES = 64 * 1024


@dataclass(frozen=True)
class StoredFile:
    """One uploaded file."""

    id: str
    owner: str  # the client that uploaded it
    filename: str
    purpose: str
    data: bytes
    created_at: float

    def body(self) -> dict[str, Any]:
        """The file object, in the shape OpenAI-style file APIs answer."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": len(self.data),
            "created_at": int(self.created_at),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
        }


class FileStore:
    """Uploaded files by id, bounded in count and total bytes; each client sees its own."""

    def __init__(self) -> None:
        self._files: dict[str, StoredFile] = {}

    def add(self, owner: str, filename: str, purpose: str, data: bytes) -> StoredFile:
        owned = [f for f in self._files.values() if f.owner == owner]
        for files, most_files, most_bytes, whose in (
            (owned, MAX_STORED_FILES // CLIENT_SHARE, MAX_STORED_BYTES // CLIENT_SHARE, "your"),
            (list(self._files.values()), MAX_STORED_FILES, MAX_STORED_BYTES, "the stack's"),
        ):
            stored_bytes = sum(len(f.data) for f in files)
            if len(files) >= most_files or stored_bytes + len(data) > most_bytes:
                raise ApiError(
                    f"file storage is full ({whose} {len(files)} files, {stored_bytes} bytes, "
                    f"of at most {most_files} files and {most_bytes} bytes): delete files you "
                    "no longer need (DELETE /v1/files/{id})",
                    status=413,
                    code="storage_full",
                )
        stored = StoredFile(f"file-{uuid.uuid4().hex}", owner, filename, purpose, data, time.time())
        self._files[stored.id] = stored
        return stored

    def get(self, owner: str, file_id: str, param: str = "file_id") -> StoredFile:
        stored = self._files.get(file_id)
        if stored is None or stored.owner != owner:
            raise ApiError(
                f"no file with id {file_id[:80]!r}", status=404, param=param, code="file_not_found"
            )
        return stored

    def delete(self, owner: str, file_id: str) -> dict[str, Any]:
        stored = self.get(owner, file_id)
        del self._files[stored.id]
        return {"id": stored.id, "object": "file", "deleted": True}

    def listing(self, owner: str) -> dict[str, Any]:
        files = [f.body() for f in self._files.values() if f.owner == owner]
        return {"object": "list", "data": files}

    def forget(self, owner: str) -> None:
        """Drop every file of `owner`, a client that has left the stack."""
        for stored in [f for f in self._files.values() if f.owner == owner]:
            del self._files[stored.id]


async def read_upload(request: web.Request) -> tuple[str, str, bytes]:
    """(filename, purpose, bytes) of a multipart upload; refused before it grows too large."""
    if request.content_type != "multipart/form-data":
        raise ApiError(
            "upload files as multipart/form-data with the fields `file` and `purpose`, not "
            f"{request.content_type!r}",
            status=415,
        )
    if (request.content_length or 0) > MAX_FILE_BYTES + MULTIPART_OVERHEAD_BYTES:
        raise _too_large()
    fields: dict[str, str] = {}
    upload: tuple[str, bytes] | None = None
    try:
        reader = await request.multipart()
        while (part := await reader.next()) is not None:
            if not isinstance(part, BodyPartReader):
                raise ApiError("a nested multipart is not a form field; send `file` and `purpose`")
            if part.name not in ("file", "purpose"):
                raise ApiError(
                    f"unexpected form field {str(part.name)[:80]!r}; send `file` and `purpose` only"
                )
            if part.name in fields or (part.name == "file" and upload is not None):
                raise ApiError(f"the form field `{part.name}` is given twice", param=part.name)
            if part.name == "file":
                upload = (_filename(part), await _read_capped(part, MAX_FILE_BYTES, _too_large()))
            else:
                too_long = ApiError("the purpose field is too long", param="purpose")
                fields["purpose"] = (await _read_capped(part, MAX_FIELD_BYTES, too_long)).decode(
                    "utf-8", errors="replace"
                )
    except (ValueError, AssertionError, UnicodeDecodeError) as exc:  # aiohttp's multipart errors
        raise ApiError(f"the multipart body is malformed: {exc}") from None
    if upload is None:
        raise ApiError("the form has no `file` field", param="file", code="missing_file")
    purpose = fields.get("purpose")
    if purpose not in PURPOSES:
        raise ApiError(
            f"purpose must be one of {list(PURPOSES)} (the local stack stores LoRA files), "
            f"got {purpose!r}",
            param="purpose",
        )
    return upload[0], purpose, upload[1]


def _filename(part: BodyPartReader) -> str:
    name = part.filename
    if not name or len(name) > MAX_FILENAME_CHARS or "/" in name or "\\" in name:
        raise ApiError(
            f"the file needs a plain file name of 1 to {MAX_FILENAME_CHARS} characters, "
            f"got {str(name)[:80]!r}",
            param="file",
        )
    return name


async def _read_capped(part: BodyPartReader, limit: int, too_large: ApiError) -> bytes:
    data = bytearray()
    while chunk := await part.read_chunk(CHUNK_BYTES):
        data += chunk
        if len(data) > limit:
            raise too_large
    return bytes(data)


def _too_large() -> ApiError:
    return ApiError(
        f"the file is larger than {MAX_FILE_BYTES} bytes, the most the local stack accepts "
        "(Sail's own limit is far higher)",
        status=413,
        param="file",
    )
