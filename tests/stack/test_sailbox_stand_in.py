"""The Sailbox stand-in (`local_stack.client.sailbox.sailbox_core`) under sail's own code.

Only sail's transport is replaced, so these drive the installed SDK from the top: the
guide's `sail.tinker_sandbox_factory`, `sail.TinkerSandbox`, `Sailbox.exec`. What they get
back must be what `sail.exec_process.ExecResult` documents, which is what notebook 08's
cloud path meets on a real Sailbox.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sail
from sail.exec_process import ExecResult
from sandbox_probes import ENV_DIR, run
from tinker_cookbook.sandbox.sandbox_interface import SandboxTerminatedError

from local_stack.client.sailbox.sailbox_core import (
    LocalSailboxCore,
    install_local_sailboxes,
    local_sailbox_core,
)
from shell_tasks.sandboxes import CourseTinkerSandbox, sailbox_factory


@pytest.fixture
def sailboxes(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalSailboxCore]:
    monkeypatch.setenv("SAIL_API_KEY", "sk_fake_stand_in")
    uninstall = install_local_sailboxes()
    yield local_sailbox_core()
    uninstall()


def test_a_timed_out_command_reports_124_and_timed_out_with_only_its_own_stderr(
    sailboxes: LocalSailboxCore,
) -> None:
    async def scenario() -> tuple[object, ExecResult]:
        sandbox = await sail.tinker_sandbox_factory(ENV_DIR, 60)
        try:
            result = await sandbox.run_command("echo out; echo err >&2; sleep 30", timeout=1)
            sailbox = sail.Sailbox.from_id(sandbox.sandbox_id)
            process = await sailbox.exec.aio(["bash", "-c", "echo late; sleep 30"], timeout=1)
            return result, await process.wait()
        finally:
            await sandbox.cleanup()

    result, exec_result = run(scenario())
    assert (result.exit_code, result.stdout, result.stderr) == (124, "out\n", "err\n")
    assert result.metrics["timed_out"] is True
    assert exec_result == ExecResult(stdout="late\n", stderr="", exit_code=124, timed_out=True)


def test_a_finished_command_keeps_its_exit_code_and_streams(sailboxes: LocalSailboxCore) -> None:
    async def scenario():
        sandbox = await sail.tinker_sandbox_factory(ENV_DIR, 60)
        try:
            return await sandbox.run_command("pwd; echo oops >&2; exit 3", workdir="/app")
        finally:
            await sandbox.cleanup()

    result = run(scenario())
    assert (result.exit_code, result.stdout, result.stderr) == (3, "/app\n", "oops\n")
    assert result.metrics == {
        "timed_out": False,
        "stdout_truncated": False,
        "stderr_truncated": False,
    }


def test_sails_write_file_fails_on_a_plain_file_and_the_course_sandbox_does_not(
    sailboxes: LocalSailboxCore,
) -> None:
    """sail 0.17.1's `TinkerSandbox.write_file` sends `mode=None` for a file that is not
    executable, which `Sailbox.fs.write` refuses; the course's sandbox writes it 0o644."""

    async def scenario() -> tuple[str, str, str]:
        guide = await sail.tinker_sandbox_factory(ENV_DIR, 60)
        try:
            with pytest.raises(TypeError):
                await guide.write_file("/app/plain.txt", "plain\n")
        finally:
            await guide.cleanup()
        course = await sailbox_factory(ENV_DIR, 60)
        assert isinstance(course, CourseTinkerSandbox)
        try:
            assert (await course.write_file("/app/plain.txt", "plain\n")).exit_code == 0
            assert (await course.write_file("/app/run.sh", "echo ran\n", True)).exit_code == 0
            modes = await course.run_command("stat -c %a plain.txt run.sh; ./run.sh", "/app")
            read = await course.read_file("/app/plain.txt")
            missing = await course.read_file("/app/missing.txt")
            assert missing.exit_code == 1 and missing.stdout == ""
            return modes.stdout, read.stdout, str(missing.stderr)
        finally:
            await course.cleanup()

    modes, read, missing = run(scenario())
    assert modes.split() == ["644", "755", "ran"]
    assert read == "plain\n" and "missing.txt" in missing


def test_the_course_factory_asks_for_no_network_and_cleanup_ends_the_sailbox(
    sailboxes: LocalSailboxCore,
) -> None:
    async def scenario() -> CourseTinkerSandbox:
        sandbox = await sailbox_factory(ENV_DIR, 60)
        await sandbox.cleanup()
        await sandbox.cleanup()  # idempotent, as sail's is
        with pytest.raises(SandboxTerminatedError):
            await sandbox.run_command("true")
        return sandbox

    sandbox = run(scenario())
    (box,) = sailboxes.sailboxes.values()
    assert box.sailbox_id == sandbox.sandbox_id and box.terminated
    assert json.loads(box.request["egress_policy_document"]) == sail.EgressPolicy.no_network()
    assert box.request["max_lifetime_seconds"] == 60 and box.request["size"] == "s"
    assert not box.sandbox.host_dir.exists()


def test_sails_inference_calls_still_reach_the_real_core(sailboxes: LocalSailboxCore) -> None:
    """Only Sailbox calls are answered locally; anything else is the real core client's."""
    assert sailboxes.api_http_request_aio.__self__ is sailboxes._real


def test_a_login_file_fools_grading_in_the_policys_sailbox_and_not_in_a_fresh_one(
    sailboxes: LocalSailboxCore,
) -> None:
    """sail's own `TinkerSandbox` runs `bash -lc`, so a ~/.profile the policy wrote runs
    before the tests in its own Sailbox; the fresh Sailbox never reads it. (The whole suite
    runs on the stand-in in `make rehearse-cloud`.)"""
    from shell_tasks.tamper import WRONG_ANSWER, tampered_reward

    shared = run(tampered_reward(".profile", WRONG_ANSWER, sailbox_factory, "shared"))
    fresh = run(tampered_reward(".profile", WRONG_ANSWER, sailbox_factory, "fresh"))
    assert (shared, fresh) == ((1.0, 0), (0.0, 0))
    # A policy's Sailbox per grading, and the fresh one: all terminated.
    assert len(sailboxes.sailboxes) == 3
    assert all(box.terminated for box in sailboxes.sailboxes.values())
