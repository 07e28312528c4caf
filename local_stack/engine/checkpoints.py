"""Tinker checkpoints on local disk: `tinker://` paths, TTLs and the archives Sail downloads.

Everything lives under one root that survives stack restarts, so a `tinker://` path saved by
one stack process resolves in the next (notebook 04 resumes training that way):

    <model_id>/run.json                       how the run was created (answers weights_info),
                                              and which client created it (its owner)
    <model_id>/<kind>/<name>/                 kind is `weights` (save_state) or `sampler_weights`
        adapter_config.json                   the adapter in Tinker's own layout
        adapter_model.safetensors             (`tinker_layout`), not PEFT's
        optimizer.safetensors                 Adam moments (`weights` only)
        adapter.tar                           the two adapter files: what Sail downloads
        checkpoint.json                       created_at and expires_at (Unix seconds)

A checkpoint is written into a staging directory and renamed into place, so a reader never
sees half of one. Once its TTL passes it is treated as absent and deleted. The root is
private to the user running the stack (directories 0700, files 0600): a model id in a path
is what lets a client use a checkpoint, so no other account on the machine may list them.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tarfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

KINDS = ("weights", "sampler_weights")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
ARCHIVE_FILE = "adapter.tar"
META_FILE = "checkpoint.json"
RUN_FILE = "run.json"
OWNER_KEY = "owner"  # in run.json: the client that created the run
# Tinker accepts TTLs from one hour to ten years.
MIN_TTL_SECONDS = 3600
MAX_TTL_SECONDS = 10 * 365 * 24 * 3600

_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9:._-]{0,127}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class CheckpointNotFound(LookupError):
    """No such checkpoint, or its TTL has passed."""


class CheckpointExists(ValueError):
    """A save without overwrite found the name taken."""


def check_name(name: str) -> None:
    """Checkpoint names become directory names: letters, digits, `.`, `_`, `-`."""
    if not _NAME.fullmatch(name):
        raise ValueError(
            f"checkpoint name {name!r:.80} must be 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit"
        )


def check_ttl(ttl_seconds: int | None) -> None:
    if ttl_seconds is not None and not MIN_TTL_SECONDS <= ttl_seconds <= MAX_TTL_SECONDS:
        raise ValueError(
            f"ttl_seconds must be between {MIN_TTL_SECONDS} (1 hour) and {MAX_TTL_SECONDS} "
            f"(10 years), or None; got {ttl_seconds}"
        )


@dataclass(frozen=True)
class CheckpointRef:
    """Which checkpoint: `tinker://<model_id>/<kind>/<name>`."""

    model_id: str
    kind: str
    name: str

    def __post_init__(self) -> None:
        if not _MODEL_ID.fullmatch(self.model_id) or self.kind not in KINDS:
            raise ValueError(f"not a checkpoint of this stack: {self.tinker_path:.200}")
        check_name(self.name)

    @classmethod
    def from_tinker_path(cls, path: str) -> CheckpointRef:
        parts = path.removeprefix("tinker://").split("/")
        if not path.startswith("tinker://") or len(parts) != 3:
            raise ValueError(
                f"not a tinker path: {path!r:.200} (expected tinker://<run>/<kind>/<name>)"
            )
        return cls(*parts)

    @property
    def tinker_path(self) -> str:
        return f"tinker://{self.model_id}/{self.kind}/{self.name}"


@dataclass(frozen=True)
class RunInfo:
    """What a training run was created with; checkpoints can only load into a matching run."""

    base_model: str
    lora_rank: int
    train_unembed: bool = True
    train_mlp: bool = True
    train_attn: bool = True


class CheckpointStore:
    """Checkpoint files and their lifetimes. `clock` is injectable so tests can expire TTLs."""

    def __init__(self, root: Path, clock: Callable[[], float] = time.time) -> None:
        """Clears what saves and deletes interrupted by a crash left in `.staging`: one stack
        serves a storage dir (see `local_stack.registry`), so none of it is in use."""
        self.root = root
        self.clock = clock
        self.root.mkdir(parents=True, exist_ok=True)
        make_private(self.root)
        shutil.rmtree(self.root / ".staging", ignore_errors=True)

    def save_run_info(self, model_id: str, info: RunInfo, owner: str) -> None:
        run_dir = self.root / model_id
        run_dir.mkdir(parents=True, exist_ok=True)
        _write_json(run_dir / RUN_FILE, {**asdict(info), OWNER_KEY: owner})

    def run_info(self, model_id: str) -> RunInfo:
        saved = self._run_record(model_id)
        saved.pop(OWNER_KEY, None)
        return RunInfo(**saved)

    def owner(self, model_id: str) -> str | None:
        """The client whose run saved `model_id`'s checkpoints (None for a run saved before
        the stack recorded owners: nobody owns it)."""
        return self._run_record(model_id).get(OWNER_KEY)

    def _run_record(self, model_id: str) -> dict:
        path = self.root / model_id / RUN_FILE
        if not path.exists():
            raise CheckpointNotFound(f"no training run {model_id!r}")
        return json.loads(path.read_text())

    @contextmanager
    def staging_dir(self) -> Iterator[Path]:
        """A fresh empty directory to write a checkpoint's files into before `publish`;
        removed if the block fails (a published one has moved into place)."""
        path = self.root / ".staging" / uuid.uuid4().hex
        path.mkdir(parents=True)
        try:
            yield path
        except BaseException:
            self._remove(path)
            raise

    def publish(
        self, ref: CheckpointRef, staging: Path, ttl_seconds: int | None, *, overwrite: bool
    ) -> None:
        """Archive the adapter, stamp the lifetime and move `staging` into place.

        Without `overwrite`, CheckpointExists if `ref` exists. The check and the write are
        one step: renaming a directory onto a non-empty one fails, so of two saves racing
        for one name exactly one wins.
        """
        with tarfile.open(staging / ARCHIVE_FILE, "w") as tar:
            for name in ADAPTER_FILES:
                tar.add(staging / name, arcname=name)
        now = self.clock()
        expires_at = None if ttl_seconds is None else now + ttl_seconds
        _write_json(staging / META_FILE, {"created_at": now, "expires_at": expires_at})
        target = self._dir(ref)
        target.parent.mkdir(parents=True, exist_ok=True)
        if overwrite:
            self._remove(target)
        else:
            self.exists(ref)  # clears an expired checkpoint out of the way
        try:
            staging.rename(target)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            self._remove(staging)
            raise CheckpointExists(f"{ref.tinker_path} already exists; pass overwrite=True") from e

    def find(self, ref: CheckpointRef) -> Path:
        """The checkpoint's directory; CheckpointNotFound if it is absent or expired."""
        directory = self._dir(ref)
        meta = directory / META_FILE
        if not meta.exists():
            raise CheckpointNotFound(f"checkpoint {ref.tinker_path} not found")
        expires_at = json.loads(meta.read_text())["expires_at"]
        if expires_at is not None and expires_at <= self.clock():
            self._remove(directory)
            raise CheckpointNotFound(f"checkpoint {ref.tinker_path} has expired")
        return directory

    def exists(self, ref: CheckpointRef) -> bool:
        try:
            self.find(ref)
        except CheckpointNotFound:
            return False
        return True

    def archive(self, ref: CheckpointRef) -> Path:
        return self.find(ref) / ARCHIVE_FILE

    def set_ttl(self, ref: CheckpointRef, ttl_seconds: int | None) -> float | None:
        """Expire `ttl_seconds` from now (None: never); returns the new expiry time."""
        meta_path = self.find(ref) / META_FILE
        meta = json.loads(meta_path.read_text())
        meta["expires_at"] = None if ttl_seconds is None else self.clock() + ttl_seconds
        _write_json(meta_path, meta)
        return meta["expires_at"]

    def expires_at(self, ref: CheckpointRef) -> float | None:
        return json.loads((self.find(ref) / META_FILE).read_text())["expires_at"]

    def delete(self, ref: CheckpointRef) -> None:
        self._remove(self.find(ref))

    def usage(self, model_ids: Iterable[str]) -> tuple[int, int]:
        """How many checkpoints the runs `model_ids` have on disk, and their bytes (expired
        ones count until `delete_expired` removes them)."""
        count = size = 0
        for model_id in model_ids:
            for meta in (self.root / model_id).glob(f"*/*/{META_FILE}"):
                count += 1
                size += sum(f.stat().st_size for f in meta.parent.iterdir() if f.is_file())
        return count, size

    def delete_expired(self) -> int:
        """Delete every checkpoint whose TTL has passed; returns how many."""
        deleted = 0
        for meta in self.root.glob(f"*/*/*/{META_FILE}"):
            model_id, kind, name = meta.parent.relative_to(self.root).parts
            try:
                self.find(CheckpointRef(model_id, kind, name))
            except CheckpointNotFound:
                deleted += 1
            except ValueError:
                continue  # not a directory this store wrote
        return deleted

    def _dir(self, ref: CheckpointRef) -> Path:
        return self.root / ref.model_id / ref.kind / ref.name

    def _remove(self, directory: Path) -> None:
        """Rename away first, so the checkpoint vanishes at once even while files are deleted."""
        doomed = self.root / ".staging" / f"deleted-{uuid.uuid4().hex}"
        doomed.parent.mkdir(parents=True, exist_ok=True)
        try:
            directory.rename(doomed)
        except FileNotFoundError:
            return  # already gone (another request expired it first)
        shutil.rmtree(doomed, ignore_errors=True)


def make_private(root: Path) -> None:
    """Directories 0700 and files 0600 from `root` down: a store written before the stack
    kept it private is made private when the stack opens it. The server's umask (0077)
    keeps everything written later private too."""
    root.chmod(0o700)
    for directory, subdirectories, files in os.walk(root):
        for name in subdirectories:
            Path(directory, name).chmod(0o700)
        for name in files:
            Path(directory, name).chmod(0o600)


def _write_json(path: Path, payload: dict) -> None:
    """Write atomically: a reader sees the old file or the new one, never a torn one."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    tmp.replace(path)
