"""The install docs/install.md describes: the pip commands `make install` and `make wheelhouse`
build for each case, the one-sentence failure when PyTorch's CPU index is away, and the course
importable from any Python or kernel of the environment without PYTHONPATH."""

from __future__ import annotations

import http.server
import os
import platform
import re
import shlex
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest
from jupyter_client.manager import KernelManager

from scripts import install

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PIN = install.torch_pin()
on_linux = pytest.mark.skipif(platform.system() != "Linux", reason="the CPU index is for Linux")


def _planned(*make_args: str) -> list[str]:
    """The pip commands (one line each) that `make <make_args>` would run, without running them."""
    env = {k: v for k, v in os.environ.items() if k not in {"TORCH", "WHEELS", "TORCH_CPU_INDEX"}}
    recipe = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", *make_args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (line,) = [line for line in recipe.splitlines() if "scripts/install.py" in line]
    argv = shlex.split(line)
    assert argv[:2] == [".venv/bin/python", "scripts/install.py"], line
    plan = subprocess.run(
        [sys.executable, "scripts/install.py", "--dry-run", *argv[2:]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return plan.splitlines()


@on_linux
def test_linux_default_takes_torch_offline_first_then_from_the_cpu_index_alone() -> None:
    upgrade_pip, torch_offline, torch_online, course = _planned("install")
    assert upgrade_pip == "pip install --quiet --upgrade pip"
    assert torch_offline == f"pip install --quiet --no-deps --no-index {PIN}"
    assert torch_online == (
        f"  if that fails: pip install --quiet --no-deps --index-url {CPU_INDEX} {PIN}"
    )
    # The CPU index serves torch alone: the course and every other pin come from the package index.
    assert course == f"pip install --quiet --editable {ROOT}"


def test_torch_cuda_opts_out_of_the_cpu_index() -> None:
    plan = _planned("install", "TORCH=cuda")
    assert plan == ["pip install --quiet --upgrade pip", f"pip install --quiet --editable {ROOT}"]


def test_wheels_folder_installs_with_no_index(tmp_path: Path) -> None:
    (tmp_path / "pip-26.3-py3-none-any.whl").touch()
    plan = _planned("install", f"WHEELS={tmp_path}")
    offline = f"--no-index --find-links {tmp_path}"
    assert plan == [
        f"pip install --quiet --upgrade {offline} pip",
        f"pip install --quiet {offline} --editable {ROOT}",
    ]


def test_wheels_folder_without_wheels_is_one_sentence(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/install.py", "install", "--wheels", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1].endswith(
        f"--wheels {tmp_path}: no wheels there (make wheelhouse fills one)"
    )


@pytest.mark.parametrize("system", ["Darwin", "Windows"])
def test_macos_and_windows_take_torch_from_the_package_index(system: str) -> None:
    steps = install.install_steps(system, "cpu", wheels=None)
    assert [step.pip[-1] for step in steps] == ["pip", str(ROOT)]
    assert not any(step.fallback for step in steps)


@on_linux
def test_wheelhouse_for_this_machine_fetches_the_cpu_torch_first(tmp_path: Path) -> None:
    build, torch_offline, torch_online, pins = _planned("wheelhouse", f"WHEELHOUSE={tmp_path}")
    get = f"pip download --quiet --only-binary=:all: --dest {tmp_path} --find-links {tmp_path}"
    assert build == f"{get} pip 'setuptools>=77'"
    assert torch_offline == f"{get} --no-deps --no-index {PIN}"
    assert torch_online == f"  if that fails: {get} --no-deps --index-url {CPU_INDEX} {PIN}"
    assert pins == f"{get} --requirement {ROOT / 'requirements.txt'}"


def test_wheelhouse_for_a_named_platform(tmp_path: Path) -> None:
    mac = _planned("wheelhouse", f"WHEELHOUSE={tmp_path}", "PLATFORM=macos-arm64")
    assert len(mac) == 2  # no CPU index: the package index's macOS torch is a CPU build
    for line in mac:
        assert line.startswith('pip_as_platform.py \'{"sys_platform": "darwin", ')
        assert "--platform macosx_14_0_arm64 " in line
    linux = _planned(
        "wheelhouse", f"WHEELHOUSE={tmp_path}", "PLATFORM=linux-aarch64", "PYTHON_VERSION=3.12"
    )
    assert any(f"--index-url {CPU_INDEX} {PIN}" in line for line in linux)
    for line in linux:
        assert "--platform manylinux_2_28_aarch64 " in line
        assert "--platform manylinux2014_aarch64 " in line
        assert "--python-version 3.12 " in line


def _wheel(folder: Path, name: str, requires: tuple[str, ...] = ()) -> None:
    """A pure-Python wheel that holds nothing but its metadata."""
    info = f"{name}-1.0.dist-info"
    files = {
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
        + "".join(f"Requires-Dist: {requirement}\n" for requirement in requires),
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as wheel:
        for path, text in files.items():
            wheel.writestr(path, text)


@pytest.mark.parametrize(
    "platform_name, expected",
    [("macos-arm64", {"app", "mac_only", "before_312"}), ("linux-aarch64", {"app", "linux_only"})],
)
def test_named_platform_wheelhouse_follows_that_platforms_markers(
    tmp_path: Path, platform_name: str, expected: set[str]
) -> None:
    index, dest = tmp_path / "index", tmp_path / "dest"
    index.mkdir()
    markers = ('sys_platform == "darwin"', 'sys_platform == "linux"', 'python_version < "3.12"')
    requires = tuple(f"{dep}; {marker}" for dep, marker in zip(REQUIRED, markers, strict=True))
    _wheel(index, "app", requires)
    for dep in REQUIRED:
        _wheel(index, dep)
    target = install.PLATFORMS[platform_name]
    python_version = "3.11" if platform_name == "macos-arm64" else "3.12"
    pip = install.pip_for(target, python_version)
    args = ["download", "--quiet", "--no-index", "--find-links", str(index), "--dest", str(dest)]
    args += [arg for tag in target.tags for arg in ("--platform", tag)]
    args += ["--only-binary=:all:", "--python-version", python_version, "app"]
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}  # no find-links of this machine's
    subprocess.run([*pip, *args], env=env, check=True, timeout=120)
    assert {wheel.name.split("-")[0] for wheel in dest.iterdir()} == expected


REQUIRED = ("mac_only", "linux_only", "before_312")


def test_unreachable_cpu_index_fails_in_one_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead_index = "http://127.0.0.1:9/whl/cpu"  # the discard port: nothing listens on loopback
    step = install._torch_step(
        ("install", "--find-links", str(tmp_path)), "torch==0.0.1", dead_index
    )
    assert install.run([step], dry_run=False) == 1
    out = capsys.readouterr()
    (sentence,) = out.err.strip().splitlines()
    assert sentence.startswith(f"Cannot reach PyTorch's CPU wheel index {dead_index} (")
    assert "`make install WHEELS=folder`" in sentence
    assert "(`TORCH=cuda`)" in sentence
    assert "--index-url" not in out.out  # the fallback never ran


def test_reachable_index_is_probed_for_torch() -> None:
    asked: list[str] = []

    class Index(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_response(200 if self.path == "/whl/cpu/torch/" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_port}"
        assert install.unreachable(f"{base}/whl/cpu/") is None
        assert "Not Found" in (install.unreachable(f"{base}/elsewhere") or "")
    finally:
        server.shutdown()
    assert asked == ["/whl/cpu/torch/", "/elsewhere/torch/"]


def test_documented_install_commands_use_variables_the_makefile_declares() -> None:
    declared = set(re.findall(r"^(\w+)\s*\?=", (ROOT / "Makefile").read_text(), re.MULTILINE))
    readme = (ROOT / "docs" / "install.md").read_text()
    used = set(re.findall(r"make (?:install|wheelhouse)((?: \w+=\S*)+)", readme))
    names = {word.split("=")[0] for group in used for word in group.split()}
    assert {"TORCH", "WHEELS", "WHEELHOUSE", "PLATFORM"} <= names
    assert names <= declared


# The environment as a kernel started by hand sees it: no PYTHONPATH, not in the checkout.
def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


IMPORT_CHECK = (
    "import budget, helpers, kimi, local_stack, notebook_ui, pathlib, shell_tasks, sweeps; "
    "root = pathlib.Path(local_stack.__file__).parent; "
    "print(helpers.__file__); "
    "print(sorted(p.name for p in (root / 'engine' / 'base_model').iterdir()))"
)


NOT_INSTALLED = "the course is not installed in this environment (run `make install`): "


def _assert_imports_this_checkout(output: str) -> None:
    lines = output.strip().splitlines()
    assert lines[-2] == str(ROOT / "helpers" / "__init__.py"), (
        f"the environment imports helpers from {lines[-2]}, not this checkout: run `make install`"
    )
    assert lines[-1] == "['model.safetensors', 'vocab.json']"


def test_python_of_the_environment_imports_the_course_without_pythonpath(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_CHECK],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, NOT_INSTALLED + done.stderr.strip().splitlines()[-1]
    _assert_imports_this_checkout(done.stdout)


def test_kernel_of_the_environment_imports_the_course_without_pythonpath(tmp_path: Path) -> None:
    kernel = KernelManager(kernel_name="python3")
    kernel.start_kernel(env=_clean_env(), cwd=str(tmp_path))
    client = kernel.blocking_client()
    client.start_channels()
    printed: list[str] = []

    def collect(message: dict) -> None:
        if message["msg_type"] == "stream":
            printed.append(message["content"]["text"])
        elif message["msg_type"] == "error":
            printed.append(f"{message['content']['ename']}: {message['content']['evalue']}")

    try:
        client.wait_for_ready(timeout=120)
        reply = client.execute_interactive(IMPORT_CHECK, output_hook=collect, timeout=120)
    finally:
        client.stop_channels()
        kernel.shutdown_kernel(now=True)
    assert reply["content"]["status"] == "ok", NOT_INSTALLED + "".join(printed)
    _assert_imports_this_checkout("".join(printed))
