"""Downloading a LoRA archive from the stack's own archive route and unpacking it, both
within fixed bounds.

An archive URL comes from a request, so its bytes are hostile until checked. The download
goes only to the stack's own archive route (the URL is checked before, in `requests`),
follows no redirect, and stops at MAX_ARCHIVE_BYTES. Unpacking decompresses through
a reader that stops at MAX_EXPANDED_BYTES, accepts regular files only, and checks each
member's declared size before reading it, so neither a compression bomb nor a sparse file
nor a huge tar header can make the server allocate more than a few megabytes.
`read_adapter_archive` is blocking: callers run it off the event loop.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import lzma
import tarfile
import zlib
from dataclasses import dataclass

import aiohttp

from local_stack.http import ApiError

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
# The largest adapter the tiny model can have (rank 32 on every module) is under 0.4 MB;
# ten times that leaves room and still keeps a hostile archive harmless.
MAX_ARCHIVE_BYTES = 4 * 1024**2
MAX_EXPANDED_BYTES = 4 * 1024**2
MAX_MEMBERS = 16
FETCH_TIMEOUT_SECONDS = 30
_PARAM = "metadata.lora"


@dataclass(frozen=True)
class Archive:
    """Downloaded archive bytes and their sha256 (what a cached adapter is compared by)."""

    data: bytes
    digest: str


async def fetch_archive(url: str) -> Archive:
    """Download an adapter archive, at most MAX_ARCHIVE_BYTES, following no redirect.

    `url` has been checked to be this stack's own archive route (`requests.check_archive_url`),
    which never redirects: a request cannot make the stack fetch any other address."""
    timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_SECONDS)
    # auto_decompress off: a Content-Encoding bomb would otherwise expand inside aiohttp.
    async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
        try:
            async with session.get(url, allow_redirects=False) as reply:
                if reply.status != 200:
                    raise ApiError(
                        f"fetching the LoRA archive gave HTTP {reply.status}", param=_PARAM
                    )
                return await _read_capped(reply)
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ApiError(
                f"could not fetch the LoRA archive: {type(exc).__name__}: {exc}", param=_PARAM
            ) from None


async def _read_capped(reply: aiohttp.ClientResponse) -> Archive:
    too_large = ApiError(
        f"the LoRA archive is larger than {MAX_ARCHIVE_BYTES} bytes", param=_PARAM, status=413
    )
    if (reply.content_length or 0) > MAX_ARCHIVE_BYTES:
        raise too_large
    data, digest = bytearray(), hashlib.sha256()
    async for chunk in reply.content.iter_chunked(64 * 1024):
        data += chunk
        digest.update(chunk)
        if len(data) > MAX_ARCHIVE_BYTES:
            raise too_large
    return Archive(bytes(data), digest.hexdigest())


def read_adapter_archive(archive: bytes) -> dict[str, bytes]:
    """The two adapter files from a .tar (or .tar.gz, .tar.bz2, .tar.xz), at its top level."""
    files: dict[str, bytes] = {}
    names: list[str] = []
    expanded = 0
    try:
        stream = _CappedReader(_decompressed(archive))
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            for member in tar:
                names.append(member.name)
                expanded += member.size
                _check_member(member, len(names), expanded)
                name = member.name.removeprefix("./")
                if name in ADAPTER_FILES:
                    if name in files:
                        raise ApiError(f"the LoRA archive has {name} twice", param=_PARAM)
                    files[name] = _read_member(tar, member)
    except (tarfile.TarError, EOFError, OSError, zlib.error, lzma.LZMAError) as exc:
        raise ApiError(
            f"the LoRA archive is not a readable tar file: {type(exc).__name__}: {exc}",
            param=_PARAM,
        ) from None
    missing = [name for name in ADAPTER_FILES if name not in files]
    if missing:
        raise ApiError(
            f"LoRA archive lacks {', '.join(missing)} at its top level (it has {names})",
            param=_PARAM,
        )
    return files


def _check_member(member: tarfile.TarInfo, count: int, expanded: int) -> None:
    """Refuse before reading: too many members, too many bytes, anything but a plain file."""
    if count > MAX_MEMBERS:
        raise ApiError(f"the LoRA archive has more than {MAX_MEMBERS} members", param=_PARAM)
    if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE) or member.sparse is not None:
        raise ApiError(
            f"the LoRA archive member {member.name!r} is not a regular file (links, "
            "directories, devices and sparse files are refused)",
            param=_PARAM,
        )
    if expanded > MAX_EXPANDED_BYTES:
        raise ApiError(
            f"the LoRA archive expands to more than {MAX_EXPANDED_BYTES} bytes",
            param=_PARAM,
            status=413,
        )


def _read_member(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    extracted = tar.extractfile(member)
    if extracted is None:  # refused before reading: only regular files get here
        raise ApiError(f"the LoRA archive member {member.name!r} is not a file", param=_PARAM)
    data = extracted.read()
    if len(data) != member.size:
        raise ApiError(f"the LoRA archive is truncated inside {member.name!r}", param=_PARAM)
    return data


def _decompressed(archive: bytes) -> io.BufferedIOBase:
    """The archive's tar stream, decompressing by its magic bytes."""
    raw = io.BytesIO(archive)
    if archive.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw)
    if archive.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if archive.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


class _CappedReader(io.RawIOBase):
    """Reads at most MAX_EXPANDED_BYTES plus tar's own headers from `inner`, and never asks
    `inner` for more than that at once (tar reads a long header in a single call)."""

    LIMIT = MAX_EXPANDED_BYTES + (MAX_MEMBERS + 4) * 2 * tarfile.BLOCKSIZE

    def __init__(self, inner: io.BufferedIOBase) -> None:
        self._inner = inner
        self._read = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        room = self.LIMIT - self._read
        wanted = room + 1 if size is None or size < 0 else min(size, room + 1)
        data = self._inner.read(wanted)
        self._read += len(data)
        if self._read > self.LIMIT:
            raise ApiError(
                f"the LoRA archive expands to more than {MAX_EXPANDED_BYTES} bytes",
                param=_PARAM,
                status=413,
            )
        return data
