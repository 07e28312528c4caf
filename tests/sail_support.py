"""What the Sail tests share: the real SDK's completer, raw HTTP, adapters and a file server."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import io
import json
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import peft
import safetensors.torch
import sail
import torch
import urllib3
from safetensors.torch import load_file

from helpers.scoring import QUESTION_SUFFIX
from local_stack.config import client_keys, process_client
from local_stack.engine.model import BASE_MODEL_NAME, adapter_config_for, load_base_model
from local_stack.engine.tinker_layout import tinker_config, to_tinker

QUESTIONS = [
    "Tom has 3 apples and buys 4 more. How many apples does Tom have now?",
    "What is 12 minus 5?",
    "A shelf holds 9 books and 8 more books are added. How many books are on the shelf?",
    "Sara has 17 stickers and gives away 12. How many stickers does Sara have left?",
]
HTTP = urllib3.PoolManager(retries=False)
# This process's own key, the one `connect` gives the SDKs: raw requests and the SDK's are
# one client, so each sees the files and LoRAs the other created.
SAIL_API_KEY = client_keys(process_client())["SAIL_API_KEY"]
KEY_HEADER = {"Authorization": f"Bearer {SAIL_API_KEY}"}
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")


def question_prompt(renderer, question: str):
    convo = [{"role": "user", "content": question + QUESTION_SUFFIX}]
    return renderer.build_generation_prompt(convo)


def make_completer(**overrides) -> sail.SailTokenCompleter:
    settings = {"model": BASE_MODEL_NAME, "max_tokens": 48, "temperature": 1.0, "poll_timeout": 30}
    return sail.SailTokenCompleter(**{**settings, **overrides})


async def sample_async(completer, renderer, questions):
    stop = renderer.get_stop_sequences()
    return await asyncio.gather(
        *(completer(question_prompt(renderer, q), stop=stop) for q in questions)
    )


def sample(completer, renderer, questions):
    return asyncio.run(sample_async(completer, renderer, questions))


def assert_logprobs_match(model, vocab, renderer, question, result) -> None:
    """The served logprobs are the model's own, recomputed here with one forward pass."""
    prompt_ids = vocab.to_compact(question_prompt(renderer, question).to_ints())
    tokens = vocab.to_compact(result.tokens)
    with torch.no_grad():
        logits_TV = model(input_ids=torch.tensor([prompt_ids + tokens])).logits[0]
    logp_TV = torch.log_softmax(logits_TV[len(prompt_ids) - 1 : -1], dim=-1)
    expected = logp_TV.gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
    assert (torch.tensor(result.maybe_logprobs) - expected).abs().max() <= 1e-4


def post_create(url: str, body: dict, key: str | None = SAIL_API_KEY):
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return HTTP.request("POST", f"{url}/v1/responses", json=body, headers=headers)


def create_body(**overrides) -> dict:
    """A small well-formed create body (raw HTTP, as the SDK sends it)."""
    fields = {
        "model": BASE_MODEL_NAME,
        "background": True,
        "raw_prompt_tokens": [163594, 14062, 163601],
        "max_output_tokens": 4,
        "metadata": {"completion_window": "balanced"},
    }
    return {**fields, **overrides}


def error_of(reply) -> str:
    return reply.json()["error"]["message"]


def save_adapter(directory: Path, seed: int, rank: int = 32) -> Path:
    """A PEFT adapter with random non-zero weights (so it changes the outputs)."""
    base, _ = load_base_model()
    config = adapter_config_for(rank)
    config.init_lora_weights = False
    torch.manual_seed(seed)
    peft.get_peft_model(base, config).save_pretrained(directory, save_embedding_layers=False)
    return directory


def load_adapter(directory: Path) -> torch.nn.Module:
    return peft.PeftModel.from_pretrained(load_base_model()[0], directory).eval()


def tar_bytes(files: dict[str, bytes], mode: str = "w") -> bytes:
    """A tar (mode "w") or tar.gz ("w:gz") of `files`, in memory."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def tinker_files(directory: Path) -> dict[str, bytes]:
    """A PEFT adapter directory's two files in Tinker's layout, as a Tinker archive holds them."""
    config = json.loads((directory / "adapter_config.json").read_text())
    weights = load_file(directory / "adapter_model.safetensors")
    return {
        "adapter_config.json": tinker_config(config["r"], config["lora_alpha"]),
        "adapter_model.safetensors": safetensors.torch.save(to_tinker(weights)),
    }


def adapter_tar(directory: Path, mode: str = "w") -> bytes:
    """A Tinker archive of the PEFT adapter in `directory`."""
    return tar_bytes(tinker_files(directory), mode)


PLANTED_RUN = "planted-archives"  # a run id no Tinker session can produce


def plant_archive(storage_dir: Path, stack_url: str, name: str, data: bytes) -> str:
    """Put `data` into the stack's storage as the archive of sampler checkpoint `name`, and
    return the archive URL Tinker serves it at: the only URLs Sail fetches adapters from,
    so hostile archives reach Sail this way. Planting again replaces what the URL serves."""
    checkpoint = storage_dir / "tinker" / PLANTED_RUN / "sampler_weights" / name
    checkpoint.mkdir(parents=True, exist_ok=True)
    (checkpoint / "adapter.tar").write_bytes(data)
    meta = {"created_at": time.time(), "expires_at": None}
    (checkpoint / "checkpoint.json").write_text(json.dumps(meta))
    return f"{stack_url}/tinker/archives/{PLANTED_RUN}/sampler_weights/{name}.tar"


Route = bytes | Callable[[http.server.BaseHTTPRequestHandler], None]


@contextlib.contextmanager
def file_server(routes: dict[str, Route]) -> Iterator[str]:
    """A loopback HTTP server: each path answers its bytes, or runs its handler function.

    `routes` may change while it runs (a test can replace what a URL serves).
    """

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the http.server spelling)
            route = routes.get(self.path.split("?")[0])
            if route is None:
                self.send_error(404)
            elif callable(route):
                route(self)
            else:
                self.send_response(200)
                self.send_header("Content-Length", str(len(route)))
                self.end_headers()
                with contextlib.suppress(OSError):  # a client may hang up on a large body
                    self.wfile.write(route)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def alongside_good_requests(renderer, good_completer, model, vocab, calls: list[Callable]) -> list:
    """Run blocking `calls` (raw HTTP) in threads while `good_completer` samples QUESTIONS.

    The well-formed requests must succeed with the model's exact logprobs whatever the calls
    do; returns the calls' results.
    """

    async def run():
        good = sample_async(good_completer, renderer, QUESTIONS)
        bad = asyncio.gather(*(asyncio.to_thread(call) for call in calls))
        return await asyncio.gather(good, bad)

    results, outcomes = asyncio.run(run())
    for question, result in zip(QUESTIONS, results, strict=True):
        assert_logprobs_match(model, vocab, renderer, question, result)
    return outcomes
