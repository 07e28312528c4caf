"""The whole course calls only what the installed SDKs have, and sends only the raw HTTP
request shapes `REQUEST_SHAPES` lists (notebook 09's `# @save` cells, in `helpers/shipping.py`).

Every source of the course is read: `budget/`, `helpers/`, `kimi/`, `notebook_ui/`,
`shell_tasks/`, `sweeps/`, `scripts/`, `bench/` and the code cells of every notebook. Each
file is walked in order with a small type inference: SDK imports, assignments, annotations,
return annotations of SDK functions (so
`await (await training_client.forward_async(...))` is a `ForwardBackwardOutput`), sail's `.aio`
variants, and, where the course annotates nothing (`training_client: Any`), the names the
course gives SDK objects (`NAME_TYPES`). A name map is a fallback, never an override: a name
bound to a value of a known non-SDK type (made by a class or function imported from another
package or defined in the file, or annotated with such a type) keeps that type, so a kernel
client, a benchmark's own `Client` or a test double is never read as an SDK object. Every
attribute looked up on an SDK module, class or instance must exist on the installed package,
and every call of an SDK callable must bind to its signature with the keywords the course
passes. A renamed or removed SDK method fails here, naming file and line.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import pytest

from helpers import shipping

ROOT = Path(__file__).resolve().parents[2]
SDKS = ("tinker", "sail", "tinker_cookbook")
SOURCE_DIRS = (
    "budget",
    "helpers",
    "kimi",
    "notebook_ui",
    "shell_tasks",
    "sweeps",
    "scripts",
    "bench",
)


def _sdk(path: str) -> Any:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


# The course's names for SDK objects it receives untyped (parameters annotated Any, fields of
# its own classes). Each name means one SDK type everywhere in the course; a generic name
# (`client`, `manager`) is not here, because the course uses it for other things too (kernel
# clients, a benchmark's own clients). A name bound to a known non-SDK value is never looked up.
NAME_TYPES = {
    "service_client": "tinker.ServiceClient",
    "training_client": "tinker.TrainingClient",
    "base_client": "tinker.TrainingClient",
    "rest_client": "tinker.lib.public_interfaces.rest_client.RestClient",
    "sampling_client": "tinker.SamplingClient",
    "completer": "sail.SailTokenCompleter",
    "policy": "helpers.serving.SnapshotCompleter",
    "renderer": "tinker_cookbook.renderers.base.Renderer",
    "sailbox": "sail.Sailbox",
}


@dataclass(frozen=True)
class Instance:
    """A value of an SDK class."""

    cls: type


@dataclass(frozen=True)
class Awaitable:
    """What calling an async SDK function gives: awaiting it gives `result`."""

    result: Any


@dataclass(frozen=True)
class Callee:
    """An SDK function reached as a method of an instance (`bound`: `self` is passed) or as
    `f.aio` (`aio`: `f`'s arguments, awaited)."""

    func: Any
    bound: bool = False
    aio: bool = False


# The course's own packages: what they return may hold SDK objects (`course.service_client`).
COURSE_PACKAGES = {*SOURCE_DIRS, "local_stack", "tests"}
# Where annotations come from (`Any`, `Callable`): naming a type, not making a value.
TYPING_MODULES = {"typing", "typing_extensions", "collections", "__future__"}


@dataclass(frozen=True)
class Foreign:
    """A value of a type from outside the SDKs: another package's (`jupyter_client`,
    `aiohttp`), or a class the file defines (`local`), whose fields may still carry the
    course's names for SDK objects."""

    origin: str
    local: bool = False


@dataclass
class Finding:
    where: str
    what: str


def _is_sdk(obj: Any) -> bool:
    """An SDK module, function or class, or a course class built on an SDK class."""
    if inspect.isclass(obj):
        return any(_is_sdk_name(klass.__module__) for klass in obj.__mro__)
    return _is_sdk_name(getattr(obj, "__module__", None) or getattr(obj, "__name__", ""))


def _is_sdk_name(module: object) -> bool:
    return isinstance(module, str) and module.split(".")[0] in SDKS


@functools.cache  # a class's source does not change during the run; reading it is the cost
def _instance_attributes(cls: type) -> frozenset[str]:
    """Names a class's methods assign on `self` (what its instances have beyond the class)."""
    names = set()
    for klass in cls.__mro__:
        try:
            tree = ast.parse(inspect.getsource(klass).lstrip())  # may be a nested class
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return frozenset(names)


def _annotation_type(func: Any, annotation: Any) -> Any:
    """An annotation (possibly a string) resolved to a class, Instance-able, or None."""
    if isinstance(annotation, str):
        import tinker
        import tinker.types
        from tinker.lib.public_interfaces.rest_client import RestClient

        namespace = {**vars(tinker), **vars(tinker.types), "types": tinker.types}
        namespace["RestClient"] = RestClient  # imported only for type checkers
        namespace.update(getattr(inspect.unwrap(func), "__globals__", {}))
        try:
            annotation = eval(annotation, namespace)  # noqa: S307 (an SDK's own annotation)
        except Exception:
            return None
    return annotation


def _returns(func: Any) -> Any:
    """The type a call of `func` gives (Awaitable for a coroutine function), or None."""
    if inspect.isclass(func):
        return Instance(func)
    try:
        annotation = inspect.signature(func).return_annotation
    except (TypeError, ValueError):
        return None
    if annotation is inspect.Signature.empty:
        return None
    resolved = _value_type(_annotation_type(func, annotation))
    target = inspect.unwrap(func)
    return Awaitable(resolved) if inspect.iscoroutinefunction(target) else resolved


def _value_type(annotation: Any) -> Any:
    """A resolved annotation as the inferred type of a value."""
    origin = typing.get_origin(annotation)
    if origin is not None and _is_sdk(origin) and getattr(origin, "__name__", "") == "APIFuture":
        [inner] = typing.get_args(annotation) or [None]
        return Awaitable(_value_type(inner))
    if inspect.isclass(annotation) and _is_sdk(annotation):
        if annotation.__name__ == "APIFuture":
            return Awaitable(None)
        return Instance(annotation)
    return None


class Walker(ast.NodeVisitor):
    """Infers SDK types through one source and records every missing attribute or bad call."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.env: dict[str, Any] = {}
        self.foreign: set[str] = set()  # names imported from other packages or defined here
        self.findings: list[Finding] = []
        self.checked = 0  # SDK attribute lookups and calls verified
        self.members: list[ast.Attribute] = []  # SDK attributes found on an SDK module or value

    def report(self, node: ast.AST, what: str) -> None:
        self.findings.append(Finding(f"{self.where}:{getattr(node, 'lineno', '?')}", what))

    # -- bindings ------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top not in SDKS:
                if top not in COURSE_PACKAGES | TYPING_MODULES:
                    self.foreign.add(alias.asname or top)
                self.env.pop(alias.asname or top, None)
            else:
                module = importlib.import_module(alias.name)
                if alias.asname:
                    self.env[alias.asname] = module
                else:
                    top = alias.name.split(".")[0]
                    self.env[top] = importlib.import_module(top)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if not node.module or node.module.split(".")[0] not in SDKS:
            for alias in node.names:
                top = node.module.split(".")[0] if node.module and not node.level else ""
                if top and top not in COURSE_PACKAGES | TYPING_MODULES:
                    self.foreign.add(alias.asname or alias.name)
                self.env.pop(alias.asname or alias.name, None)
            return
        module = importlib.import_module(node.module)
        for alias in node.names:
            if hasattr(module, alias.name):
                self.env[alias.asname or alias.name] = getattr(module, alias.name)
                self.checked += 1
            else:
                try:
                    sub = importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    self.report(node, f"{node.module} has no {alias.name!r}")
                    continue
                self.env[alias.asname or alias.name] = sub

    def visit_Assign(self, node: ast.Assign) -> None:
        inferred = self.infer(node.value)
        for target in node.targets:
            if isinstance(target, ast.Name) and inferred is not None:
                self.env[target.id] = inferred
            elif isinstance(target, ast.Tuple | ast.List) and isinstance(inferred, Foreign):
                self.forget(target, inferred)  # `manager, client = start_new_kernel()`
            elif isinstance(target, ast.Name | ast.Tuple | ast.List):
                self.forget(target)
            else:
                self.infer(target)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        bases = [self.infer(base) for base in node.bases]
        for decorator in node.decorator_list:
            self.infer(decorator)
        self.env.pop(node.name, None)
        if not any(inspect.isclass(base) and _is_sdk(base) for base in bases):
            self.env[node.name] = Foreign(node.name, local=True)  # not an SDK object
        for statement in node.body:
            self.visit(statement)

    def visit_withitem(self, node: ast.withitem) -> None:
        inferred = self.infer(node.context_expr)
        if isinstance(node.optional_vars, ast.Name) and inferred is not None:
            self.env[node.optional_vars.id] = inferred
        elif node.optional_vars is not None:
            self.forget(node.optional_vars)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            inferred = self.infer(node.value)
            if isinstance(node.target, ast.Name) and inferred is not None:
                self.env[node.target.id] = inferred

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        outer = dict(self.env)  # a function's names are its own
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
            self.env.pop(arg.arg, None)
            annotated = self.infer(arg.annotation) if arg.annotation is not None else None
            if inspect.isclass(annotated) and _is_sdk(annotated):
                self.env[arg.arg] = Instance(annotated)
            elif isinstance(annotated, Foreign):  # `client: Client`: not an SDK object
                self.env[arg.arg] = annotated
        outer_foreign = set(self.foreign)
        self.foreign -= {arg.arg for arg in [*node.args.posonlyargs, *node.args.args]}
        self.foreign -= {arg.arg for arg in node.args.kwonlyargs}
        for statement in node.body:
            self.visit(statement)
        self.env = outer
        self.foreign = outer_foreign

    def _loop(self, node: ast.For | ast.AsyncFor) -> None:
        self.infer(node.iter)
        self.forget(node.target)
        for statement in [*node.body, *node.orelse]:
            self.visit(statement)

    visit_For = _loop
    visit_AsyncFor = _loop

    def forget(self, target: ast.AST, value: Foreign | None = None) -> None:
        """Names rebound to values of unknown type (or of a known non-SDK type)."""
        for name in ast.walk(target):
            if isinstance(name, ast.Name):
                if value is None:
                    self.env.pop(name.id, None)
                else:
                    self.env[name.id] = value

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_Expr(self, node: ast.Expr) -> None:
        self.infer(node.value)

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.infer(child)
            else:
                self.visit(child)

    # -- inference -------------------------------------------------------------------------
    def infer(self, node: ast.expr | None) -> Any:
        if node is None:
            return None
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in self.foreign:
                return Foreign(node.id)
            return Instance(_sdk(NAME_TYPES[node.id])) if node.id in NAME_TYPES else None
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Await):
            inner = self.infer(node.value)
            if isinstance(inner, Foreign):
                return inner
            return inner.result if isinstance(inner, Awaitable) else None
        if isinstance(node, ast.Call):
            return self.call(node)
        for child in ast.iter_child_nodes(node):  # arguments, comprehensions, f-strings...
            if isinstance(child, ast.expr):
                self.infer(child)
            elif isinstance(child, ast.comprehension):
                self.infer(child.iter)
                self.forget(child.target)
                for condition in child.ifs:
                    self.infer(condition)
        return None

    def attribute(self, node: ast.Attribute) -> Any:
        base = self.infer(node.value)
        name = node.attr
        if isinstance(base, Foreign) and not base.local:
            return Foreign(f"{base.origin}.{name}")
        if inspect.ismodule(base) and _is_sdk(base):
            if hasattr(base, name):
                self.checked += 1
                self.members.append(node)
                return getattr(base, name)
            try:
                return importlib.import_module(f"{base.__name__}.{name}")
            except ImportError:
                self.report(node, f"module {base.__name__} has no attribute {name!r}")
                return None
        owner = base.cls if isinstance(base, Instance) else base
        if inspect.isclass(owner) and _is_sdk(owner):
            return self.member(node, owner, name, instance=isinstance(base, Instance))
        if callable(base) and _is_sdk(base) and name == "aio":
            self.checked += 1
            if not hasattr(base, "aio"):
                self.report(node, f"{base.__qualname__} has no .aio variant")
            return Callee(base, aio=True)
        if base is None and name in NAME_TYPES:  # e.g. `course.service_client`, `self.renderer`
            return Instance(_sdk(NAME_TYPES[name]))
        return None

    def member(self, node: ast.AST, cls: type, name: str, *, instance: bool) -> Any:
        fields = {}
        for klass in cls.__mro__:
            fields.update(getattr(klass, "__annotations__", {}))
            fields.update(getattr(klass, "model_fields", {}) or {})
        if (
            not hasattr(cls, name)
            and name not in fields
            and (not instance or name not in _instance_attributes(cls))
        ):
            self.report(node, f"{cls.__module__}.{cls.__qualname__} has no attribute {name!r}")
            return None
        self.checked += 1
        if isinstance(node, ast.Attribute):
            self.members.append(node)
        member = inspect.getattr_static(cls, name, None)
        if isinstance(member, property) and member.fget is not None:
            return _returns(member.fget)
        if name in fields and not callable(getattr(cls, name, None)):
            annotation = fields[name]
            annotation = getattr(annotation, "annotation", annotation)  # a pydantic field
            return _value_type(_annotation_type(cls, annotation))
        if not hasattr(cls, name):  # set in __init__: its type is not declared
            return Instance(_sdk(NAME_TYPES[name])) if name in NAME_TYPES else None
        value = getattr(cls, name)
        return Callee(value, bound=True) if instance and callable(value) else value

    def call(self, node: ast.Call) -> Any:
        func = self.infer(node.func)
        for argument in [*node.args, *(k.value for k in node.keywords)]:
            self.infer(argument)
        if isinstance(func, Foreign):
            return Foreign(f"{func.origin}()", local=func.local)
        if isinstance(func, Callee):
            self.bind(node, func.func, bound=func.bound)
            result = _returns(func.func)
            if func.aio and not isinstance(result, Awaitable):
                return Awaitable(result)
            return result
        if callable(func) and _is_sdk(func):
            self.bind(node, func, bound=False)
            return _returns(func)
        return None

    def bind(self, node: ast.Call, func: Any, *, bound: bool) -> None:
        """The call's positional count and keyword names must fit the installed signature."""
        if any(isinstance(a, ast.Starred) for a in node.args) or any(
            k.arg is None for k in node.keywords
        ):
            return  # *args / **kwargs: the names are not visible here
        try:
            signature = inspect.signature(func.__init__ if inspect.isclass(func) else func)
        except (TypeError, ValueError):
            return
        params = list(signature.parameters.values())
        if bound or inspect.isclass(func):
            params = params[1:]
        signature = signature.replace(parameters=params)
        placeholders = [object()] * len(node.args)
        try:
            signature.bind_partial(*placeholders, **{k.arg: object() for k in node.keywords})
        except TypeError as error:
            name = getattr(func, "__qualname__", repr(func))
            self.report(node, f"{name}{signature} does not take this call: {error}")
        else:
            self.checked += 1


# ---------------------------------------------------------------------------------------
# The course's sources.


@dataclass
class Source:
    where: str
    tree: ast.Module
    text: str = field(repr=False)


def _parse(text: str, where: str) -> ast.Module:
    lines = ["" if line.lstrip().startswith(("%", "!")) else line for line in text.splitlines()]
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    return compile("\n".join(lines), where, "exec", flags=flags)


def course_sources() -> list[Source]:
    sources = []
    for directory in SOURCE_DIRS:
        for path in sorted((ROOT / directory).rglob("*.py")):
            text = path.read_text()
            where = str(path.relative_to(ROOT))
            sources.append(Source(where, _parse(text, where), text))
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = [c.source for c in nbformat.read(path, 4).cells if c.cell_type == "code"]
        text = "\n".join(cells)  # one namespace, in order, as a kernel runs them
        sources.append(Source(path.name, _parse(text, path.name), text))
    return sources


SOURCES = course_sources()


def walk(source: Source) -> Walker:
    walker = Walker(source.where)
    for statement in source.tree.body:
        walker.visit(statement)
    return walker


def test_every_sdk_call_in_the_course_exists_and_binds() -> None:
    findings, checked = [], {}
    for source in SOURCES:
        walker = walk(source)
        findings += walker.findings
        checked[source.where] = walker.checked
    assert not findings, "\n".join(f"{f.where}: {f.what}" for f in findings)
    # The walk really follows the course: these files are full of SDK calls.
    for where in ("helpers/serving.py", "helpers/training.py", "09_ship_the_adapter.ipynb"):
        assert checked[where] >= 5, (where, checked[where])


def test_a_renamed_sdk_method_is_caught() -> None:
    """The test above would fail if a helper called a method the SDK lacks."""
    [serving] = [s for s in SOURCES if s.where == "helpers/serving.py"]
    assert "save_weights_for_sampler_async" in serving.text
    renamed = serving.text.replace("save_weights_for_sampler_async", "save_weights_for_sampler_v2")
    walker = walk(Source(serving.where, _parse(renamed, serving.where), renamed))
    assert any("save_weights_for_sampler_v2" in f.what for f in walker.findings), walker.findings


def _folder(where: str) -> str:
    return "notebooks" if where.endswith(".ipynb") else where.split("/")[0]


def _plant(source: Source, line_number: int, line: str) -> Walker:
    lines = source.text.splitlines()
    lines[line_number - 1] = line
    text = "\n".join(lines)
    return walk(Source(source.where, _parse(text, source.where), text))


@pytest.mark.parametrize("folder", [*SOURCE_DIRS, "notebooks"])
def test_a_renamed_sdk_method_in_any_folder_is_caught(folder: str) -> None:
    """In every folder the walk reads, rename SDK attributes the course uses (one at a time,
    at its place): each rename is reported at its line. A folder that calls no SDK (sweeps/
    and budget/ today) gets a misnamed call appended to each file instead, in that file's own
    context."""
    sources = [s for s in SOURCES if _folder(s.where) == folder]
    assert sources, folder
    planted = 0
    for source in sources:
        appended = (
            f"{source.text}\nimport tinker\ntinker.ServiceClient().create_lora_training_clientt()"
        )
        walker = walk(Source(source.where, _parse(appended, source.where), appended))
        assert any("create_lora_training_clientt" in f.what for f in walker.findings), source
    for source in sources:
        walker = walk(source)
        assert not walker.findings
        for node in walker.members[:3]:  # a few per file keep the test quick
            line = source.text.splitlines()[node.end_lineno - 1]
            start = node.end_col_offset - len(node.attr)
            assert line[start : node.end_col_offset] == node.attr
            renamed = f"{line[:start]}{node.attr}_renamed{line[node.end_col_offset :]}"
            planted_walker = _plant(source, node.end_lineno, renamed)
            assert any(
                f"{node.attr}_renamed" in f.what and f.where.endswith(f":{node.end_lineno}")
                for f in planted_walker.findings
            ), (source.where, node.end_lineno, node.attr, planted_walker.findings)
            planted += 1
    if folder not in ("sweeps", "budget", "notebook_ui"):  # none calls an SDK of its own
        assert planted, f"{folder}: no SDK attribute found to rename"


@pytest.mark.parametrize(
    "code",
    [
        # A kernel client from jupyter_client, a benchmark's own class, a test double: none
        # of them is a TrainingClient, whatever the name.
        "from jupyter_client.manager import start_new_kernel\n"
        "manager, client = start_new_kernel()\nclient.execute_interactive('1')",
        "class Client:\n    pass\ndef f(client: Client):\n    client.tinker_key",
        "class FakeTrainer:\n    pass\ntraining_client = FakeTrainer()\ntraining_client.whatever()",
        "async def f(client):\n    await client.anything_at_all()",
    ],
)
def test_names_of_other_types_are_not_read_as_sdk_objects(code: str) -> None:
    walker = walk(Source("snippet", _parse(code, "snippet"), code))
    assert not walker.findings, walker.findings


def test_a_name_map_entry_still_binds_untyped_course_values() -> None:
    code = "async def f(training_client):\n    await training_client.forward_backwards_async()"
    walker = walk(Source("snippet", _parse(code, "snippet"), code))
    assert any("forward_backwards_async" in f.what for f in walker.findings), walker.findings


@pytest.mark.parametrize(
    ("code", "missing"),
    [
        ("import tinker\nc = tinker.ServiceClient()\nc.create_lora_client_async()", "create_lora"),
        (
            "import tinker\nasync def f(training_client):\n"
            "    r = await (await training_client.forward_async([], 'x'))\n    r.loss_fn_outputz",
            "loss_fn_outputz",
        ),
        ("import sail\nsail.Sailbox.create.aio(app=1, imagez=2)", "imagez"),
        ("from tinker_cookbook.weights import build_lora_adaptor", "build_lora_adaptor"),
        ("course.service_client.create_rest_client().delete_checkpoint_x()", "delete_checkpoint_x"),
    ],
)
def test_chains_awaits_and_aio_are_followed(code: str, missing: str) -> None:
    walker = walk(Source("snippet", _parse(code, "snippet"), code))
    assert any(missing in f.what for f in walker.findings), walker.findings


# ---------------------------------------------------------------------------------------
# Raw HTTP.

# Calls that send an HTTP request without the SDKs.
RAW_HTTP = ("urlopen", "urlretrieve", "session.get", "session.post", "session.request")


def _literal_keys(node: ast.Dict) -> set[str]:
    return {k.value for k in node.keys if isinstance(k, ast.Constant)}


def raw_requests(source: Source) -> list[tuple[int, str, str, set[str] | None]]:
    """(line, method, route, json fields or None) for every raw request `source` sends; not
    the one inside `sail_request`, which passes on its own arguments."""
    found = []
    passed_on = {
        id(node)
        for function in ast.walk(source.tree)
        if isinstance(function, ast.AsyncFunctionDef) and function.name == "sail_request"
        for node in ast.walk(function)
    }
    dicts: dict[str, set[str]] = {}
    for node in ast.walk(source.tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    dicts[target.id] = _literal_keys(node.value)
    for node in ast.walk(source.tree):
        if not isinstance(node, ast.Call) or id(node) in passed_on:
            continue
        func = ast.unparse(node.func)
        if func.endswith("sail_request") and len(node.args) >= 2:
            method, route = (ast.unparse(a) for a in node.args[:2])
            body = next((k.value for k in node.keywords if k.arg == "json"), None)
            fields = None
            if isinstance(body, ast.Dict):
                fields = _literal_keys(body)
            elif isinstance(body, ast.Name):
                fields = dicts.get(body.id, set())
            found.append((node.lineno, method, route, fields))
        elif func.endswith(RAW_HTTP):
            url = ast.unparse(node.args[0]) if node.args else ""
            route = "'{signed archive URL}'" if "signed_url" in url else repr(url)
            found.append((node.lineno, "'GET'", route, None))
    return found


# Scripts and benchmarks send raw HTTP on purpose (to the local stack's own routes, to a
# package index); the table is of requests the course sends to Sail.
SAIL_SENDERS = ("helpers", "kimi", "shell_tasks", "sweeps", "notebooks")


def test_every_raw_http_request_is_in_the_table() -> None:
    seen, problems = set(), []
    for source in [s for s in SOURCES if _folder(s.where) in SAIL_SENDERS]:
        for line, method, route, fields in raw_requests(source):
            if not (method.startswith(("'", '"')) and route.startswith(("'", '"'))):
                problems.append(f"{source.where}:{line}: {method} {route} is not a literal route")
                continue
            key = (ast.literal_eval(method), ast.literal_eval(route))
            seen.add(key)
            try:
                shipping.check_shape(*key, dict.fromkeys(fields or ()))
            except AssertionError as error:
                problems.append(f"{source.where}:{line}: {error}")
    assert not problems, "\n".join(problems)
    # Notebook 09 and the helper send the upload flow; notebooks 02 and 09 fetch the archive.
    assert {("POST", "/v1/files"), ("POST", "/v1/loras"), ("GET", "{signed archive URL}")} <= seen


def test_a_guessed_field_outside_the_table_is_caught() -> None:
    code = 'await sail_request("POST", "/v1/loras", json={"name": "x", "adapter_id": "f"})'
    [(_, method, route, fields)] = raw_requests(Source("snippet", _parse(code, "s"), code))
    with pytest.raises(AssertionError, match="adapter_id"):
        shipping.check_shape(
            ast.literal_eval(method), ast.literal_eval(route), dict.fromkeys(fields)
        )


def test_the_sdk_internals_the_course_relies_on_exist() -> None:
    """Calls the SDKs make for the course: sail's signed-URL helper needs this tinker method,
    which tinker 0.36 removed (why tinker is pinned)."""
    from tinker.lib.public_interfaces.rest_client import RestClient

    source = inspect.getsource(_sdk("sail.get_tinker_checkpoint_signed_url_async"))
    for method in (
        "set_checkpoint_ttl_from_tinker_path_async",
        "get_checkpoint_archive_url_from_tinker_path_async",
    ):
        assert method in source
        assert inspect.iscoroutinefunction(inspect.unwrap(getattr(RestClient, method)))
