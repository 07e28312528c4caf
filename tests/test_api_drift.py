"""Every tinker / tinker_cookbook / sail symbol the course calls exists and takes our arguments.

When a pinned SDK is upgraded, this test names the call that broke before a notebook does.
Each entry: (dotted path, positional args, keyword args) as the course passes them; the
args are bound to the signature (not called), so a renamed or removed parameter fails.

The list is checked against the notebooks themselves: their code cells are parsed, every
call on an SDK name or SDK object is found (outside `if course.backend == "local":`
blocks, which the cloud never runs), and each must be in the list and bind, with the
notebook's own argument names, to the installed signature.
"""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path
from typing import Any, NamedTuple

import nbformat
import pytest

SENTINEL = object()
CALLS: list[tuple[str, tuple, dict[str, Any]]] = [
    # Notebook 01: scoring.
    ("tinker_cookbook.renderers.get_renderer", ("kimi_k26",), {"tokenizer": SENTINEL}),
    ("tinker_cookbook.renderers.get_text_content", (SENTINEL,), {}),
    ("tinker_cookbook.tokenizer_utils.get_tokenizer", ("moonshotai/Kimi-K2.6",), {}),
    ("tinker_cookbook.tokenizer_utils.register_tokenizer", ("name", SENTINEL), {}),
    ("tinker.ModelInput.empty", (), {}),
    ("tinker.ModelInput.to_ints", (SENTINEL,), {}),
    ("tinker_cookbook.renderers.base.Renderer.build_generation_prompt", (SENTINEL, []), {}),
    ("tinker_cookbook.renderers.base.Renderer.get_stop_sequences", (SENTINEL,), {}),
    ("tinker_cookbook.renderers.base.Renderer.parse_response", (SENTINEL, []), {}),
    (
        "tinker_cookbook.rl.types.StepResult",
        (),
        {
            "reward": 1.0,
            "episode_done": True,
            "next_observation": SENTINEL,
            "next_stop_condition": [],
            "metrics": {},
            "logs": {},
        },
    ),
    # Notebook 02: snapshot and serve.
    ("tinker.ServiceClient", (), {}),
    (
        "tinker.ServiceClient.create_lora_training_client_async",
        (SENTINEL,),
        {"base_model": "moonshotai/Kimi-K2.6", "rank": 32},
    ),
    (
        "tinker.TrainingClient.save_weights_for_sampler_async",
        (SENTINEL, "name"),
        {"ttl_seconds": 3600},
    ),
    (
        "sail.get_tinker_checkpoint_signed_url_async",
        (SENTINEL, "tinker://run/sampler_weights/x"),
        {"ttl_seconds": 3600},
    ),
    # The method sail's helper needs: gone from tinker 0.36 (why tinker is pinned).
    (
        "tinker.lib.public_interfaces.rest_client.RestClient"
        ".get_checkpoint_archive_url_from_tinker_path_async",
        (SENTINEL, "tinker://run/sampler_weights/x"),
        {},
    ),
    (
        "sail.SailTokenCompleter",
        (),
        {
            "model": "moonshotai/Kimi-K2.6",
            "max_tokens": 1024,
            "temperature": 1.0,
            "completion_window": "balanced",
            "tinker_lora_signed_url": "http://x",
            "adapter_config": {},
            "tinker_lora_name": "name",
        },
    ),
    ("sail.reset_transports", (), {}),
    # Notebook 04: the training loop.
    ("tinker_cookbook.rl.rollouts.do_group_rollout", (SENTINEL, SENTINEL), {"strategy": None}),
    ("tinker_cookbook.rl.rollout_strategy.MinViableGroup", (), {"min_successful": 2}),
    ("tinker_cookbook.rl.data_processing.compute_advantages", (SENTINEL,), {}),
    ("tinker_cookbook.rl.data_processing.assemble_training_data", (SENTINEL, SENTINEL), {}),
    (
        "tinker_cookbook.rl.train.train_step",
        (),
        {
            "data_D": [],
            "training_client": SENTINEL,
            "learning_rate": 1e-5,
            "num_substeps": 1,
            "loss_fn": "importance_sampling",
            "metrics": {},
        },
    ),
    ("tinker_cookbook.rl.metrics.compute_kl_sample_train", (SENTINEL, SENTINEL), {}),
    (
        "tinker.ServiceClient.create_lora_training_client_async",
        (SENTINEL,),
        {"base_model": "moonshotai/Kimi-K2.6", "rank": 32, "seed": 0},
    ),
    (
        "tinker.TrainingClient.save_state_async",
        (SENTINEL, "name"),
        {"ttl_seconds": 3600, "overwrite": True},
    ),
    ("tinker.ServiceClient.create_rest_client", (SENTINEL,), {}),
    (
        "tinker.lib.public_interfaces.rest_client.RestClient"
        ".delete_checkpoint_from_tinker_path_async",
        (SENTINEL, "tinker://run/sampler_weights/x"),
        {},
    ),
    ("tinker.TrainingClient.load_state_with_optimizer_async", (SENTINEL, "tinker://x"), {}),
    ("tinker_cookbook.rl.types.TrajectoryGroup.get_total_rewards", (SENTINEL,), {}),
    # The faster-loops notebook: the cookbook's own off-policy mode, shown beside ours.
    (
        "tinker_cookbook.rl.train.AsyncConfig",
        (),
        {"max_steps_off_policy": 3, "groups_per_batch": 4},
    ),
    # The one-step notebook: a Datum, the loss by hand, one optimizer step, LoRA sizes.
    ("tinker.Datum", (), {"model_input": SENTINEL, "loss_fn_inputs": {}}),
    ("tinker.TrainingClient.forward_async", (SENTINEL, [], "importance_sampling"), {}),
    ("tinker.TrainingClient.forward_backward_async", (SENTINEL, [], "importance_sampling"), {}),
    ("tinker.AdamParams", (), {"learning_rate": 1e-4, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8}),
    ("tinker.TrainingClient.optim_step_async", (SENTINEL, SENTINEL), {}),
    ("tinker_cookbook.model_info.get_model_attributes", ("moonshotai/Kimi-K2.6",), {}),
    (
        "tinker_cookbook.hyperparam_utils.get_lora_param_count",
        ("moonshotai/Kimi-K2.6",),
        {"lora_rank": 32},
    ),
    ("tinker_cookbook.hyperparam_utils._get_hidden_size", ("moonshotai/Kimi-K2.6",), {}),
    ("tinker_cookbook.hyperparam_utils.get_lr", ("meta-llama/Llama-3.1-8B",), {"is_lora": True}),
    # The shipping notebook: a short run's state, and scoring fixed tokens.
    ("tinker.TrainingClient.load_state_async", (SENTINEL, "tinker://x"), {}),
    ("tinker.ModelInput.from_ints", ([1, 2],), {}),
    # Notebook 07: sandboxed rollouts.
    ("sail.tinker_sandbox_factory", ("env_dir", 600), {"size": "s"}),
    ("sail.EgressPolicy.allow_all", (), {}),
    ("sail.EgressPolicy.no_network", (), {}),
    ("tinker_cookbook.renderers.base.get_text_content", (SENTINEL,), {}),
    (
        "tinker_cookbook.sandbox.sandbox_interface.SandboxInterface.run_command",
        (SENTINEL, "ls"),
        {"workdir": "/app", "timeout": 10, "max_output_bytes": 1000},
    ),
    ("tinker_cookbook.sandbox.sandbox_interface.SandboxInterface.read_file", (SENTINEL, "x"), {}),
    (
        "tinker_cookbook.sandbox.sandbox_interface.SandboxInterface.write_file",
        (SENTINEL, "x", "content"),
        {},
    ),
    ("tinker_cookbook.sandbox.sandbox_interface.SandboxInterface.cleanup", (SENTINEL,), {}),
]


def resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            obj = getattr(obj, attribute)
        return obj
    raise ImportError(dotted)


@pytest.mark.parametrize(("dotted", "args", "kwargs"), CALLS, ids=[c[0] for c in CALLS])
def test_symbol_exists_and_accepts_our_arguments(dotted: str, args: tuple, kwargs: dict) -> None:
    target = resolve(dotted)
    signature = inspect.signature(target)
    signature.bind(*args, **kwargs)


def test_sandbox_interface_has_the_methods_our_sandbox_implements() -> None:
    from tinker_cookbook.sandbox.sandbox_interface import SandboxInterface

    for name in ("run_command", "read_file", "write_file", "send_heartbeat", "cleanup"):
        assert callable(getattr(SandboxInterface, name))
    assert "sandbox_id" in dir(SandboxInterface)


# --- the list against the notebooks ------------------------------------------------------

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
SDKS = ("tinker", "tinker_cookbook", "sail")
SANDBOX = "tinker_cookbook.sandbox.sandbox_interface.SandboxInterface"
RENDERER = "tinker_cookbook.renderers.base.Renderer"
# The notebooks' names for SDK objects, and the SDK class each one is.
SDK_OBJECTS = {
    "course.service_client": "tinker.ServiceClient",
    "training_client": "tinker.TrainingClient",
    "course.renderer": RENDERER,
    "self.renderer": RENDERER,
    "prompt": "tinker.ModelInput",
    "observation": "tinker.ModelInput",
    "group": "tinker_cookbook.rl.types.TrajectoryGroup",
    "sandbox": SANDBOX,
    "box": SANDBOX,
}


class NotebookCall(NamedTuple):
    notebook: str
    dotted: str  # the SDK symbol
    positional: int  # how many positional arguments the notebook passes, `self` included
    keywords: tuple[str, ...]


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_local_only(node: ast.If) -> bool:
    """`if course.backend == "local"`, alone or and-ed with other conditions."""
    test = node.test
    is_and = isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And)
    return "course.backend == 'local'" in map(ast.unparse, test.values if is_and else [test])


def notebook_sdk_calls(path: Path) -> list[NotebookCall]:
    """Every call in `path`'s code cells on an imported SDK name or a known SDK object."""
    cells = nbformat.read(path, as_version=4).cells
    source = "\n".join(c.source for c in cells if c.cell_type == "code")
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(source, path.name, "exec", flags=flags)
    imported: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in SDKS:
                    imported[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in SDKS:
            for alias in node.names:
                imported[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    calls: list[NotebookCall] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_local_only(node):
            for child in node.orelse:  # the body never runs in the cloud
                visit(child)
            return
        if isinstance(node, ast.Call) and (name := _dotted(node.func)):
            receiver, _, method = name.rpartition(".")
            head, _, rest = name.partition(".")
            keywords = tuple(k.arg for k in node.keywords if k.arg)
            if receiver in SDK_OBJECTS:
                dotted, positional = f"{SDK_OBJECTS[receiver]}.{method}", len(node.args) + 1
            elif head in imported:
                dotted, positional = ".".join(filter(None, [imported[head], rest])), len(node.args)
            else:
                dotted = None
            if dotted:
                calls.append(NotebookCall(path.name, dotted, positional, keywords))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return calls


NOTEBOOK_CALLS = [call for path in NOTEBOOKS for call in notebook_sdk_calls(path)]


# Notebooks that only read what other notebooks wrote (run folders) and call no SDK.
NO_SDK_CALLS = {"05_compare_runs.ipynb"}


def test_every_notebook_has_sdk_calls_found() -> None:
    """Guards the parser: a notebook that calls the SDKs and yields no call was misread."""
    expected = {path.name for path in NOTEBOOKS} - NO_SDK_CALLS
    assert {call.notebook for call in NOTEBOOK_CALLS} == expected


@pytest.mark.parametrize("call", NOTEBOOK_CALLS, ids=lambda c: f"{c.notebook[:2]}:{c.dotted}")
def test_the_list_has_every_sdk_call_a_notebook_makes(call: NotebookCall) -> None:
    assert call.dotted in {dotted for dotted, _, _ in CALLS}, f"add {call.dotted} to CALLS"
    signature = inspect.signature(resolve(call.dotted))
    signature.bind(*[SENTINEL] * call.positional, **dict.fromkeys(call.keywords, SENTINEL))
