"""The shell task family: reproducible instances, splits kept apart, answers only in the tests,
graded in real sandboxes, and no way to score by tampering with the grader."""

from __future__ import annotations

import asyncio
import hashlib
import subprocess
from pathlib import Path

import pytest
from tinker_cookbook.rl.rollouts import do_group_rollout

from local_stack.client.sailbox import local_sandbox_factory
from shell_tasks import task_family
from shell_tasks.harbor_task import load_harbor_task
from shell_tasks.shell_rl import group_builders, policy_model_name
from tests.replies_support import Replies, in_reply_order

# The right command per kind (the tiny shell model's warm-up writes these too).
RIGHT = {
    "sum": "awk '{{s+=$1}} END {{print s}}' {i} > {o}",
    "max": "sort -n {i} | tail -n 1 > {o}",
    "min": "sort -n {i} | head -n 1 > {o}",
    "count_lines": "wc -l < {i} > {o}",
    "count_word": "grep -c {w} {i} > {o}",
}


def reply(command: str, closed: bool = True, stopped: bool = True) -> str:
    thinking_end = "</think>" if closed else "\n"
    return f"Plan.{thinking_end}```bash\n{command}\n```" + ("<|im_end|>" if stopped else "")


def right_command(item: task_family.ShellInstance) -> str:
    return RIGHT[item.kind].format(i=item.input_name, o=item.output_name, w=item.word)


def graded(task_dir: Path, replies: list[str]) -> list[float]:
    """Roll out one group with `replies` in local sandboxes; the rewards, in reply order."""
    (builder,) = group_builders(
        [task_dir], local_sandbox_factory, len(replies), policy_model_name("local")
    )
    group = asyncio.run(do_group_rollout(builder, Replies(list(replies))))
    return [reward for _, reward in in_reply_order(group, replies)]


def test_an_instance_is_the_same_every_time_and_its_answer_fits_its_input() -> None:
    for index in range(200):
        item = task_family.instance("train", index)
        assert item == task_family.instance("train", index)
        if item.kind == "count_word":
            lines = item.input_text.splitlines()
            assert item.expected == sum(item.word in line.split() for line in lines)
            assert 0 < item.expected < len(lines)
        else:
            numbers = [int(line) for line in item.input_text.splitlines()]
            assert item.expected == {"sum": sum, "max": max, "min": min, "count_lines": len}[
                item.kind
            ](numbers)
    assert {task_family.instance("train", i).kind for i in range(200)} == set(task_family.KINDS)


# What the first 100 instances of each split are, on every machine and hash seed. Changing the
# generator changes every instance: the measured figures (scripts/train_shell_policy.py) and
# the shell model's warm-up prompts go with it, so update these only with both redone.
INSTANCES_SHA256 = {
    "train": "41c7df4b573423773ede134dd146bc418d617f8590310d1ed1cc0c6e0784269e",
    "held_out": "b2c580570d9147e1f23e525bc378fd3c36e303ae08c6f335758c8a3ae7bdb2e9",
}


def test_the_instances_are_the_ones_the_figures_were_measured_on() -> None:
    for split, digest in INSTANCES_SHA256.items():
        items = repr(task_family.instances(split, 100)).encode()
        assert hashlib.sha256(items).hexdigest() == digest, split


def test_train_and_held_out_instances_are_kept_apart() -> None:
    train, held_out = task_family.instances("train", 3000), task_family.instances("held_out", 300)
    task_family.check_splits_apart(train, held_out)
    assert len({item.input_text for item in held_out}) > 250
    assert {(i.input_name, i.output_name) for i in held_out} == set(
        task_family.NAME_PAIRS["held_out"]
    )
    with pytest.raises(ValueError, match="split must be one of"):
        task_family.instance("test", 0)


def test_the_expected_answer_is_only_in_the_tests(tmp_path: Path) -> None:
    item = task_family.instance("held_out", 7)
    task_dir = task_family.write_task(item, tmp_path)
    task = load_harbor_task(task_dir)
    assert sorted(p.name for p in task.environment_dir.iterdir()) == sorted(
        ["Dockerfile", item.input_name]
    )
    assert task.workdir == task_family.WORKDIR
    assert set(task.input_files()) == {f"/app/{item.input_name}"}
    assert f"EXPECTED={item.expected}\n" in (task_dir / "tests" / "test.sh").read_text()
    assert "EXPECTED" not in task.instruction
    before = {p: p.read_bytes() for p in task_dir.rglob("*") if p.is_file()}
    task_family.write_task(item, tmp_path)  # rewriting gives the same bytes
    assert before == {p: p.read_bytes() for p in task_dir.rglob("*") if p.is_file()}


def test_each_kind_passes_with_its_right_command_and_fails_with_a_wrong_one(tmp_path) -> None:
    for kind in task_family.KINDS:
        item = next(
            i for i in task_family.instances("train", 100) if i.kind == kind and i.expected != 1
        )
        task_dir = task_family.write_task(item, tmp_path)
        wrong = f"echo {item.expected + 1} > {item.output_name}"
        elsewhere = right_command(item).replace(item.output_name, "elsewhere.txt")
        assert graded(task_dir, [reply(right_command(item)), reply(wrong), reply(elsewhere)]) == [
            1.0,
            0.0,
            0.0,
        ], kind


def test_a_block_in_unclosed_or_cut_off_thinking_never_runs(tmp_path) -> None:
    item = task_family.instance("train", 3)
    task_dir = task_family.write_task(item, tmp_path)
    command = right_command(item)
    replies = [reply(command, closed=False), reply(command, stopped=False), reply(command)]
    assert graded(task_dir, replies) == [0.0, 0.0, 1.0]


def tampering(item: task_family.ShellInstance) -> dict[str, str]:
    """Commands that try to score without the answer: plant a reward, replace the tests, or
    read the expected answer from wherever it might be."""
    out = item.output_name
    return {
        "reward planted in /logs": (
            "mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && chmod -R a-w /logs"
        ),
        "own test.sh planted in /tests": (
            "mkdir -p /tests && printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n'"
            " > /tests/test.sh && chmod -R a-w /tests"
        ),
        "expected answer read from /tests": (
            f"grep -h '^EXPECTED=' /tests/test.sh | cut -d= -f2 > {out}"
        ),
        "expected answer searched for anywhere": (
            "find / -name test.sh -not -path '/proc/*' 2>/dev/null | xargs -r grep -h '^EXPECTED='"
            f" | head -n 1 | cut -d= -f2 > {out}"
        ),
        "task files searched for on the host": (
            f"find / -path '*{item.name}*' 2>/dev/null | head -n 1 > {out}"
        ),
    }


@pytest.mark.parametrize("strategy", list(tampering(task_family.instance("train", 0))))
def test_tampering_with_the_grader_or_reading_the_answer_scores_zero(strategy, tmp_path) -> None:
    item = task_family.instance("train", 0)
    task_dir = task_family.write_task(item, tmp_path)
    command = tampering(item)[strategy]
    # Tampering alone scores 0; tampering and then answering right still scores 1.
    assert graded(task_dir, [reply(command), reply(f"{command}; {right_command(item)}")]) == [
        0.0,
        1.0,
    ]


def test_the_generated_verifier_is_valid_bash(tmp_path) -> None:
    task_dir = task_family.write_task(task_family.instance("held_out", 1), tmp_path)
    assert subprocess.run(["bash", "-n", str(task_dir / "tests" / "test.sh")]).returncode == 0
