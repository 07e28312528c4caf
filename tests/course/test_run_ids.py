"""Sail is told a LoRA name unique to each run, kept when the run resumes.

`{run_name}-step-{k}` repeats across attendees and reruns; the run id that `RunLog` records
in the run's folder does not, and a resumed run reads its own back.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import helpers.runlog as runlog
import helpers.training as training
from helpers.runlog import RunLog

SETTINGS = {"group_size": 4, "learning_rate": 1e-4}


def lora_name_sent(monkeypatch: pytest.MonkeyPatch, run_name: str) -> str:
    """The `lora_name` that notebook 04's snapshot of step 0 hands to `sail_policy`."""
    sent: dict[str, Any] = {}

    async def sail_policy(*args: Any, lora_name: str, **kwargs: Any) -> None:
        sent["lora_name"] = lora_name

    monkeypatch.setattr(training, "sail_policy", sail_policy)
    settings = training.LoopSettings(run_name, 4, 1e-4, 8, 1.0, "balanced")
    course = SimpleNamespace(
        service_client=None, adapter_config={}, model_name="moonshotai/Kimi-K2.6"
    )
    asyncio.run(training.snapshot_policy(f"{run_name}-step-0", settings, None, course))
    return sent["lora_name"]


def new_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a fresh kernel knows of run ids: nothing."""
    monkeypatch.setattr(runlog, "_RUN_IDS", {})


def test_two_runs_with_one_run_name_send_different_names(monkeypatch, tmp_path: Path) -> None:
    names = []
    for attendee in ("ada", "bo"):
        new_process(monkeypatch)
        RunLog("arithmetic", tmp_path / attendee).resume(SETTINGS)
        names.append(lora_name_sent(monkeypatch, "arithmetic"))
    assert names[0] != names[1]
    assert all(name.startswith("arithmetic-step-0-") for name in names)


def test_a_resumed_run_keeps_its_name(monkeypatch, tmp_path: Path) -> None:
    new_process(monkeypatch)
    RunLog("arithmetic", tmp_path).resume(SETTINGS)
    first = lora_name_sent(monkeypatch, "arithmetic")
    new_process(monkeypatch)  # the kernel restarted; the run resumes from its folder
    RunLog("arithmetic", tmp_path).resume(SETTINGS)
    assert lora_name_sent(monkeypatch, "arithmetic") == first


def test_a_run_recorded_before_ids_gets_one_and_keeps_it(monkeypatch, tmp_path: Path) -> None:
    run = RunLog("old", tmp_path)
    run.commit(settings=SETTINGS, completed_steps=0, checkpoint=None)
    new_process(monkeypatch)
    given = run.resume(SETTINGS)["run_id"]
    new_process(monkeypatch)
    assert RunLog("old", tmp_path).resume(SETTINGS)["run_id"] == given
