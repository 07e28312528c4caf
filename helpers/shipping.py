# Generated from notebooks/09_ship_the_adapter.ipynb by `make helpers`. Do not edit: change
# the `# @save` cells there, then run `make helpers` again.
"""Shipping an adapter's plumbing: the short run shipped when notebook 04 left none, the
export's size and the room it needs, the base model the converter reads, the archive fetched
and unpacked safely, given tokens scored with Tinker's `forward` (its logprobs, their gaps
to Sail's, and whether those can tell the adapter from the base model), and the raw HTTP
requests that make the PEFT files a named LoRA on Sail.

The `sail` SDK has no call for uploading a LoRA, so these requests go to the endpoint, with
the key, that the SDK's own `sail.Config.from_env()` finds. `REQUEST_SHAPES` lists every
request shape the course sends, each route and JSON body field documented (with its source) or
guessed; `tests/repo/test_sdk_drift.py` fails when the course sends one that is not in it. The
local stack accepts these shapes, so only the real Sail can prove a guess wrong, and what its
error then says is not documented.
"""

import asyncio
import getpass
import io
import json
import random
import re
import secrets
import shutil
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import aiohttp
import pandas as pd
import sail
import tinker

from helpers.backend import local_base_model_dir
from helpers.errors import CourseConfigError
from helpers.notebook_parameters import resolve
from helpers.scoring import MathGroupBuilder
from helpers.training import run_step
from kimi.adapter_size import ArchiveEstimate, estimate_kimi_k26
from notebook_ui.progress import is_interactive


async def train_short_run(cfg: Any, course: Any, training_client: Any) -> None:
    """`cfg.short_run_steps` steps of notebook 04's loop, with its settings on this backend
    but for the run name (`<run_name>-short`) and `max_tokens`: what this notebook ships when
    notebook 04 left no run it can load."""
    loop = resolve(
        "04_training_loop", cfg.backend, run_name=f"{cfg.run_name}-short", max_tokens=cfg.max_tokens
    )
    for step in range(cfg.short_run_steps):
        rows = random.Random(f"{cfg.seed}-{step}").sample(course.train_rows, loop.groups_per_step)
        builders = [MathGroupBuilder(row, course.renderer, loop.group_size) for row in rows]
        record, _ = await run_step(step, builders, loop, training_client, course)
        print(f"  step {step:2d}: reward {record['reward']:+.3f}")


def lora_pairs(in_features: int, out_features: int, rank: int) -> int:
    """Parameters of one LoRA on an in -> out linear layer: A (r x in) and B (out x r)."""
    return rank * (in_features + out_features)


def estimate_tiny_llama(config: dict[str, Any], rank: int, targets: list[str]) -> ArchiveEstimate:
    """Exact for the local model: every targeted linear layer of a Llama config, float32."""
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = hidden // config["num_attention_heads"]
    kv = config["num_key_value_heads"] * head_dim
    shapes = {
        "q_proj": (hidden, hidden),
        "k_proj": (hidden, kv),
        "v_proj": (hidden, kv),
        "o_proj": (hidden, hidden),
        "gate_proj": (hidden, inter),
        "up_proj": (hidden, inter),
        "down_proj": (inter, hidden),
    }
    per_layer = sum(lora_pairs(*shapes[m], rank) for m in targets if m in shapes)
    parameters = per_layer * config["num_hidden_layers"]
    if "lm_head" in targets:
        parameters += lora_pairs(hidden, config["vocab_size"], rank)
    return ArchiveEstimate(parameters, parameters * 4, "every targeted layer of the tiny model")


def check_free_disk(directory: Path, estimate: ArchiveEstimate) -> int:
    """Free bytes where `directory` lives; refuses in one sentence if the export won't fit."""
    directory.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(directory).free
    if free < estimate.disk_bytes:
        raise CourseConfigError(
            f"{directory} has {free / 1e9:.1f} GB free, but downloading and unpacking a "
            f"{estimate.archive_bytes / 1e9:.1f} GB archive and converting it into a "
            f"{estimate.export_bytes / 1e9:.1f} GB export needs about "
            f"{estimate.disk_bytes / 1e9:.1f} GB: free some space, or set COURSE_RUNS_DIR "
            "to a disk that has it."
        )
    return free


def available_memory() -> int:
    """Bytes of memory this machine can give a process now without swapping."""
    import psutil

    return psutil.virtual_memory().available


def check_free_memory(estimate: ArchiveEstimate, available: int | None = None) -> int:
    """Available memory; refuses in one sentence if the conversion would not fit in it."""
    available = available_memory() if available is None else available
    if available < estimate.memory_bytes:
        raise CourseConfigError(
            f"this machine has {available / 1e9:.1f} GB of memory available, but converting "
            f"a {estimate.archive_bytes / 1e9:.1f} GB archive holds about "
            f"{estimate.memory_bytes / 1e9:.1f} GB at once (the converter loads the whole "
            "archive and copies each expert's shared factor): convert on a machine with that "
            "much memory, or sample from the Tinker checkpoint without converting it."
        )
    return available


def cloud_base_model_dir(model_name: str, directory: Path) -> Path:
    """A stand-in for `model_name`'s checkpoint: its config.json, and one safetensors file
    with an empty tensor under each weight name of its model.safetensors.index.json.

    Two small downloads instead of the whole model: `build_lora_adapter` reads only the
    config and the weight names, unless the model fuses projections the adapter trains
    separately (Nemotron, Qwen3.5), which Kimi K2.6 does not."""
    import torch
    from huggingface_hub import hf_hub_download
    from safetensors.torch import save_file

    if (directory / "config.json").exists():
        return directory
    staging = directory.with_name(directory.name + ".partial")
    staging.mkdir(parents=True, exist_ok=True)
    config = hf_hub_download(model_name, "config.json")
    index = json.loads(
        Path(hf_hub_download(model_name, "model.safetensors.index.json")).read_text()
    )
    names = {name: torch.empty(0) for name in index["weight_map"]}
    save_file(names, staging / "names.safetensors")
    shutil.copyfile(config, staging / "config.json")
    staging.rename(directory)
    return directory


def export_plan(course: Any, rank: int, runs_dir: Path) -> tuple[Path, ArchiveEstimate]:
    """The base-model directory `build_lora_adapter` converts against (the model's
    `config.json` and weight names, no weights), and how large the export will be."""
    if course.backend == "local":
        base_model_dir = local_base_model_dir(runs_dir / "base-model-tiny")
        config = json.loads((base_model_dir / "config.json").read_text())
        targets = course.adapter_config["target_modules"]
        return base_model_dir, estimate_tiny_llama(config, rank, targets)
    stand_in = cloud_base_model_dir(course.model_name, runs_dir / "base-model-stand-in")
    return stand_in, estimate_kimi_k26(rank)


async def download_archive(signed_url: str, directory: Path) -> int:
    """Fetch the archive at `signed_url` next to `directory`, unpack only its regular files,
    by their base names, into `directory` (so a hostile archive cannot write elsewhere), then
    delete it. Returns the archive's size in bytes."""
    archive_path = directory.parent / "archive.tar"
    async with aiohttp.ClientSession(
        trust_env=True, timeout=aiohttp.ClientTimeout(sock_read=300)
    ) as session:
        async with session.get(signed_url) as reply:
            reply.raise_for_status()
            with archive_path.open("wb") as out:
                async for chunk in reply.content.iter_chunked(1024**2):
                    out.write(chunk)
    with tarfile.open(archive_path) as tar:
        for member in filter(tarfile.TarInfo.isfile, tar.getmembers()):
            contents = tar.extractfile(member)
            assert contents is not None  # a regular file always has contents
            with contents, (directory / Path(member.name).name).open("wb") as unpacked:
                shutil.copyfileobj(contents, unpacked)
    size = archive_path.stat().st_size
    archive_path.unlink()
    return size


def scoring_datum(prompt: tinker.ModelInput, completion: list[int]) -> tinker.Datum:
    """Score `completion` after `prompt`: weight 1 on the completion's tokens, 0 on the prompt's."""
    tokens = prompt.to_ints() + completion
    weights = [0.0] * (prompt.length - 1) + [1.0] * len(completion)
    # Plain lists: tinker's Datum turns them into tensors.
    inputs: dict[str, Any] = {"target_tokens": tokens[1:], "weights": weights}
    return tinker.Datum(model_input=tinker.ModelInput.from_ints(tokens[:-1]), loss_fn_inputs=inputs)


async def forward_logprobs(client: tinker.TrainingClient, pairs: list) -> list[list[float]]:
    """Per-token logprobs of each (prompt, completion) pair's completion, from `forward`."""
    data = [scoring_datum(p, c) for p, c in pairs]
    result = await (await client.forward_async(data, "cross_entropy"))
    return [
        out["logprobs"].tolist()[-len(c) :]
        for out, (_, c) in zip(result.loss_fn_outputs, pairs, strict=True)
    ]


def gaps(a: list[list[float]], b: list[list[float]]) -> list[float]:
    """|a - b| token by token, over every completion."""
    return [abs(x - y) for xs, ys in zip(a, b, strict=True) for x, y in zip(xs, ys, strict=True)]


def gap_table(scores: dict[str, list[list[float]]]) -> pd.DataFrame:
    """Each scorer's largest and mean gap to Sail's logprobs (`scores["Sail"]`)."""
    return pd.DataFrame(
        {
            scorer: {"max |x - Sail|": max(gap), "mean |x - Sail|": sum(gap) / len(gap)}
            for scorer, values in scores.items()
            if scorer != "Sail"
            for gap in [gaps(values, scores["Sail"])]
        }
    ).T


# The adapter's effect must be this many times the noise. By the triangle inequality (token by
# token, then on average), the model farther from Sail is then at least SEPARATION_RATIO - 1
# times as far from Sail as the nearer one.
SEPARATION_RATIO = 3.0


class Separation(NamedTuple):
    """The adapter's `effect` on the logprobs (mean |adapter - base|, both from Tinker) and
    the `noise` (the smaller of their two mean gaps to Sail, whose kernels differ)."""

    effect: float
    noise: float

    @property
    def decisive(self) -> bool:
        return self.effect >= SEPARATION_RATIO * self.noise

    def sentence(self) -> str:
        return (
            f"the adapter moves these logprobs by {self.effect:.2e} on average, less than "
            f"{SEPARATION_RATIO:g}x the {self.noise:.2e} by which Sail and Tinker differ, so "
            "this comparison cannot tell the adapter from the base model: shown, not asserted"
        )


def mean_gap(a: list[list[float]], b: list[list[float]]) -> float:
    """Mean |a - b| over every token of every completion."""
    gap = gaps(a, b)
    return sum(gap) / len(gap)


def separation(
    adapter: list[list[float]], base: list[list[float]], sampler: list[list[float]]
) -> Separation:
    """Tinker's adapter and base logprobs against the sampler's, for the same tokens."""
    noise = min(mean_gap(adapter, sampler), mean_gap(base, sampler))
    return Separation(mean_gap(adapter, base), noise)


LORAS_PAGE = "Sail docs, LoRAs page (docs.sailresearch.com/loras)"
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
    ("GET", "/v1/files"): RequestShape(Field(guess="the list route of OpenAI's files API"), {}),
    ("DELETE", "/v1/files/{id}"): RequestShape(
        Field(guess="the delete route of OpenAI's files API (the page shows only files.create)"), {}
    ),
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
    assert shape is not None, f"{method} {route} is not in REQUEST_SHAPES"
    unknown = set(fields or {}) - set(shape.fields)
    assert not unknown, f"{method} {route} sends {sorted(unknown)}, not in REQUEST_SHAPES"
    return shape


READ_TIMEOUT_SECONDS = 300  # a stalled connection fails after this long


async def sail_request(
    method: str, route: str, *, path_args: dict[str, str] | None = None, **kwargs: Any
) -> dict:
    """One request to Sail: `route` is the table's, `path_args` fill it in. Raises
    SailRequestError with Sail's message for a 4xx or 5xx (its reply's text when not JSON)."""
    check_shape(method, route, kwargs.get("json"))
    path = route.format(**(path_args or {}))
    timeout = kwargs.pop("timeout", aiohttp.ClientTimeout(total=READ_TIMEOUT_SECONDS))
    config = sail.Config.from_env()  # the key and endpoint the SDK itself uses, read now
    headers = {"Authorization": f"Bearer {config.api_key}"}
    url = config.api_url.rstrip("/") + path
    async with aiohttp.ClientSession(trust_env=True, timeout=timeout) as session:
        async with session.request(method, url, headers=headers, **kwargs) as reply:
            text = await reply.text()
    try:
        body = json.loads(text) if text.strip() else {}  # a delete may answer 204, empty
    except ValueError:
        body = None
    if reply.status >= 400 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise SailRequestError(f"HTTP {reply.status} from {method} {path}: {message or text[:500]}")
    return body


class _LineBar:
    """Progress as a line at each further tenth of the file, 100% included."""

    def __init__(self, total: int, desc: str) -> None:
        self.total, self.desc, self.done, self.tenths = max(total, 1), desc, 0, 0

    def update(self, count: int) -> None:
        self.done += count
        tenths = min(10, self.done * 10 // self.total)
        if tenths > self.tenths:
            print(f"{self.desc}: {tenths * 10}%")
        self.tenths = tenths

    def close(self) -> None:
        pass


def _progress_bar(total: int, desc: str) -> Any:
    """A byte-counting bar in JupyterLab; a line per tenth elsewhere (papermill keeps logs)."""
    if is_interactive():
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit="B", unit_scale=True)
    return _LineBar(total, desc)


class _CountingReader(io.BufferedReader):
    """A file that reports how much of it has been read (aiohttp streams it in chunks)."""

    def __init__(self, path: Path, progress: Any) -> None:
        super().__init__(io.FileIO(path, "rb"))
        self._progress = progress

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self._progress.update(len(data))
        return data


# Uploads: no total timeout (Kimi K2.6's PEFT export takes a long while to send); instead each
# file gets one sized to it at no less than this rate, and a stalled connection fails after
# READ_TIMEOUT_SECONDS.
MIN_UPLOAD_BYTES_PER_SECOND = 2 * 1024**2
UPLOAD_OVERHEAD_SECONDS = 60


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
    stored = uploaded.get("bytes")  # a guessed field: the page does not show the answer
    print(
        f"uploaded {path.name}: {uploaded['id']} ({size:,} bytes sent, "
        f"{'size not reported' if stored is None else f'{stored:,} stored'}, in "
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


async def delete_from_sail(name: str, file_ids: list[str]) -> None:
    """Delete the LoRA `name`, then each file; a refused delete is printed and the rest go on
    (the LoRA's delete route is a guess). Then says whether the LoRA is still on Sail."""
    try:
        print(await sail_request("DELETE", "/v1/loras/{name}", path_args={"name": name}))
    except SailRequestError as error:
        print("refused:", error)
    for file_id in file_ids:
        try:
            print(await sail_request("DELETE", "/v1/files/{id}", path_args={"id": file_id}))
        except SailRequestError as error:
            print("refused:", error)
    try:
        await sail_request("GET", "/v1/loras/{name}", path_args={"name": name})
    except SailRequestError as error:
        print("afterwards:", error)
    else:
        print(f"LoRA {name!r} is still on Sail")
