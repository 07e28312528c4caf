"""Every "Try this" of notebooks 03, 05, 07 and 08, done as the bullet says, with small
parameters, and checked for the change the bullet announces.

(Those of notebooks 01, 02 and 04 are in tests/notebooks/test_results.py.) Each run sets the
parameters a bullet names, or makes the edit it describes in the cell it names, and gets a
last cell that prints what the test reads as JSON (`tests.notebook_support.probe`). One run
checks several bullets where they touch different cells. A bullet that needs cloud keys is
run on the cloud path against the local stack by the test named beside it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from local_stack.kernel.supervisor import stop_local_stack
from tests.notebook_support import (
    PROBE,
    ROOT,
    assert_no_key_leaks,
    error_outputs,
    kernel_env,
    printed,
    probe,
    run,
    succeeded,
)
from tests.sweep_support import AFTER, BEFORE, SWEEP, TINY
from tests.wait_support import wait_until


def with_probe(
    notebook: str,
    folder: Path,
    probe_code: str,
    edits: list[tuple[str, str, str]] = (),
    after: str | None = None,
    steps: str = "",
) -> Path:
    """A copy of `notebook` with each (cell needle, old, new) replacement made, as the
    bullet tells a learner to, and a cell that runs `steps` (what a bullet says to type)
    and prints `PROBE <json>`: after the code cell whose source contains `after`, or last."""
    nb = nbformat.read(ROOT / "notebooks" / notebook, as_version=4)
    for needle, old, new in edits:
        [cell] = [c for c in nb.cells if c.cell_type == "code" and needle in c.source]
        assert old in cell.source, (needle, old)
        cell.source = cell.source.replace(old, new, 1)
    code = f"import json\n\n{steps}\nprint({PROBE!r} + json.dumps({probe_code}))"
    probe_cell = nbformat.v4.new_code_cell(code)
    if after is None:
        nb.cells.append(probe_cell)
    else:
        [index] = [i for i, c in enumerate(nb.cells) if c.cell_type == "code" and after in c.source]
        nb.cells.insert(index + 1, probe_cell)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"edited-{notebook}"
    nbformat.write(nb, path)
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Path]]:
    """Folders whose runs/ and local-stack storage the runs of this module use; every stack
    their kernels started is stopped at the end (stacks outlive their kernels)."""
    used: list[Path] = []
    yield used
    for folder in used:
        stop_local_stack(folder / "stack")


def folder_for(folders: list[Path], tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    folder = tmp_path_factory.mktemp(name)
    folders.append(folder)
    return folder


# -- 03_one_grpo_step ----------------------------------------------------------------------

NOTEBOOK_03 = "03_one_grpo_step.ipynb"
PROBE_03 = """{
    "weights": [float(weights.min()), float(weights.max())],
    "kl_before": kl_before,
    "kl_after": kl_after,
    "gap": gap / scale,
    "means": [float(mean_positive), float(mean_negative)],
    "shown_advantage": advantage_D[shown],
    "advantages": [min(advantage_D), max(advantage_D)],
    "trained_advantages": sorted(set(table.loc[table["mask"] > 0, "advantage"])),
    "columns": list(table.columns),
    "prompts": sorted(
        {course.tokenizer.decode(g.trajectories_G[0].transitions[0].ob.to_ints())
         for g in trajectory_groups}
    ),
}"""


def run_03(folders, factory, name: str, parameters: dict, edits=()) -> tuple[dict, str]:
    """Notebook 03 in a folder and a local stack of its own: what the probe printed, and
    papermill's log with the executed notebook (for the leak check)."""
    folder = folder_for(folders, factory, name)
    notebook = with_probe(NOTEBOOK_03, folder, PROBE_03, list(edits))
    executed = succeeded(run(notebook, folder / "out.ipynb", parameters, kernel_env(folder)))
    assert not error_outputs(executed)
    return probe(executed), executed.metadata["log"] + (folder / "out.ipynb").read_text()


@pytest.fixture(scope="module")
def default_03(folders, tmp_path_factory) -> dict:
    return run_03(folders, tmp_path_factory, "03-default", {})[0]


def test_03_temperature_07_moves_the_weights_off_1_and_the_kl_jumps(
    default_03: dict, folders, tmp_path_factory
) -> None:
    """Try this: `temperature = 0.7`."""
    cold, _ = run_03(folders, tmp_path_factory, "03-temperature", {"temperature": 0.7})

    def farthest(seen: dict) -> float:
        low, high = seen["weights"]
        return max(high - 1, 1 - low)

    assert farthest(default_03) < 1e-4 < 1e-2 < farthest(cold)  # "leave 1"
    for name in ("optim/kl_sample_train_v1", "optim/kl_sample_train_v2"):
        assert abs(cold["kl_before"][name]) > 1000 * abs(default_03["kl_before"][name]), name
    assert cold["gap"] <= 1e-4  # the loss by hand still matches Tinker's (the notebook asserts)


def test_03_learning_rate_3e4_moves_both_sides_further_and_min_shows_a_negative_advantage(
    default_03: dict, folders, tmp_path_factory
) -> None:
    """Try this: `learning_rate = 3e-4`; and, in the same run (another cell), `max` -> `min`
    in the cell that picks `shown`."""
    seen, _ = run_03(
        folders,
        tmp_path_factory,
        "03-lr-min",
        {"learning_rate": 3e-4},
        [("shown = max(range(len(data_D))", "shown = max(", "shown = min(")],
    )
    (up, down), (default_up, default_down) = seen["means"], default_03["means"]
    assert up > default_up > 0 > default_down > down
    name = "optim/kl_sample_train_v2"
    assert seen["kl_after"][name] > default_03["kl_after"][name]
    # The datum shown is the most negative one; its trained positions carry that advantage.
    assert seen["shown_advantage"] == seen["advantages"][0] < 0
    assert seen["trained_advantages"] == [pytest.approx(seen["shown_advantage"])]
    assert default_03["shown_advantage"] == default_03["advantages"][1] > 0
    assert seen["columns"] == default_03["columns"]  # every other column means the same


def test_03_seed_1_draws_other_problems_and_every_check_holds(
    default_03: dict, folders, tmp_path_factory
) -> None:
    """Try this: `seed = 1`. The run succeeding means every assertion in it held."""
    seen, text = run_03(folders, tmp_path_factory, "03-seed-1", {"seed": 1})
    assert not set(seen["prompts"]) & set(default_03["prompts"])
    assert "bit for bit, in all 16 groups" in text and "PEFT agrees" in text
    assert_no_key_leaks(text)


# -- 05_compare_runs -------------------------------------------------------------------------

NOTEBOOK_05 = "05_compare_runs.ipynb"
SWEEP_ARGS = ["-p", "seed", "0", "1", "2", "--name", "seeds3"]  # the bullet's SWEEP
# Small: one learning rate (so three runs), three steps of two groups of two.
SMALL_SWEEP = [*TINY, "-p", "steps", "3"]
SEEDS3 = ["seeds3-seed0", "seeds3-seed1", "seeds3-seed2"]


def sweep(env: dict) -> subprocess.Popen:
    """`make sweep SWEEP="..."` runs `python -m sweeps.runner ...`; in a session of its own, as a
    terminal runs a foreground job, so that Ctrl-C's SIGINT can go to all of it."""
    return subprocess.Popen(
        [*SWEEP, *SWEEP_ARGS, *SMALL_SWEEP], env=env, cwd=ROOT, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip


@pytest.fixture(scope="module")
def seeds3(folders, tmp_path_factory) -> tuple[Path, str, str]:
    """Try this: run the sweep with three seeds, and interrupt it with Ctrl-C halfway, then
    run it again. The folder, and what the interrupted and the second sweep printed."""
    folder = folder_for(folders, tmp_path_factory, "seeds3")
    env = kernel_env(folder)
    first = sweep(env)
    second_run = folder / "runs" / SEEDS3[1] / "state.json"

    def second_started() -> bool:
        return second_run.exists() and json.loads(second_run.read_text())["completed_steps"]

    wait_until(lambda: second_started() or first.poll() is not None, "the second run", 600, 0.05)
    assert second_started(), first.stdout.read()
    os.killpg(first.pid, signal.SIGINT)  # Ctrl-C: SIGINT to the terminal's foreground group
    interrupted, _ = first.communicate(timeout=120)
    assert first.returncode == 130, interrupted
    again = sweep(env)
    resumed, _ = again.communicate(timeout=900)
    assert again.returncode == 0, resumed
    return folder, interrupted, resumed


def test_05_ctrl_c_then_again_runs_only_the_unfinished_runs(seeds3) -> None:
    folder, interrupted, resumed = seeds3
    assert f"interrupted: run the same command again to resume {SEEDS3[1]}, {SEEDS3[2]}" in (
        interrupted
    )
    assert f"{SEEDS3[0]}: finished earlier, not run again" in resumed
    assert f"{SEEDS3[0]}: started" not in resumed
    assert f"{SEEDS3[1]}: started, resuming after step" in resumed
    assert f"{SEEDS3[2]}: started" in resumed and "done: 3 finished, 0 failed" in resumed
    for name in SEEDS3:
        state = json.loads((folder / "runs" / name / "state.json").read_text())
        assert state["completed_steps"] == 3 and state["eval_after"]


CURVES_PROBE = """{
    "lines": [[line.get_label(), [float(y) for y in line.get_ydata()]] for line in ax.lines],
    "raw": {run.name: [r[curve_metric] for r in run.records] for run in selected},
}"""


def run_05(folder: Path, out: str, parameters: dict, env: dict) -> nbformat.NotebookNode:
    notebook = with_probe(NOTEBOOK_05, folder / out, CURVES_PROBE, after="curve_metric = ")
    return succeeded(run(notebook, folder / out / "out.ipynb", parameters, env))


def moving_mean(values: list[float], window: int) -> list[float]:
    return [
        sum(values[max(0, k - window + 1) : k + 1]) / len(values[max(0, k - window + 1) : k + 1])
        for k in range(len(values))
    ]


@pytest.mark.parametrize("smoothing", [1, 20])
def test_05_three_seeds_and_the_smoothing_window(seeds3, smoothing: int) -> None:
    """Try this: `runs = "seeds3-*"` (the spread now comes from three seeds); and
    `smoothing = 1`, then `smoothing = 20` (each run's bold curve is the mean over that many
    steps; at 1 it is the raw curve)."""
    folder, _, _ = seeds3
    parameters = {"runs": "seeds3-*", "smoothing": smoothing}
    executed = run_05(folder, f"compare-{smoothing}", parameters, kernel_env(folder))
    text = printed(executed, "spread, freedom = seed_spread(")
    assert "(pooled, 2 degrees of freedom)" in text and "over 3 seeds" in text
    seen = probe(executed)
    assert sorted(seen["raw"]) == SEEDS3
    # Each run's bold curve is labelled with what differs: its seed; the raw ones are unnamed.
    bold = {label: values for label, values in seen["lines"] if not label.startswith("_")}
    assert sorted(bold) == ["seed=0", "seed=1", "seed=2"]
    smoothed = []
    for name, raw in seen["raw"].items():
        curve = bold[f"seed={name[-1]}"]
        assert curve == pytest.approx(moving_mean(raw, smoothing), abs=1e-12)
        smoothed.append(curve != raw)
    assert any(smoothed) == (smoothing > 1)  # at 1, the bold curves are the raw ones


def test_05_metric_correct_given_format_ranks_by_that_metric(
    fixture_runs: Path,
    folders,
    tmp_path_factory,
) -> None:
    """Try this: `metric = "correct_given_format"`, on runs of two learning rates, two seeds
    each (tests/sweep_support.py's fixture runs): the gains, and the ranking of the learning
    rates, are those of the correct rate among well-formed answers."""
    folder = folder_for(folders, tmp_path_factory, "metric")
    env = {**kernel_env(folder), "COURSE_RUNS_DIR": str(fixture_runs)}
    parameters = {"runs": "fx-lr*", "metric": "correct_given_format"}
    executed = succeeded(run(NOTEBOOK_05, folder / "out.ipynb", parameters, env))
    text = printed(executed, "spread, freedom = seed_spread(")

    def given_format(rewards: list[list[float]]) -> float:
        flat = [r for problem in rewards for r in problem]
        return sum(r == 1.0 for r in flat) / sum(r in (1.0, 0.0) for r in flat)

    means = {
        lr: sum(given_format(AFTER[(lr, s)]) - given_format(BEFORE) for s in (0, 1)) / 2
        for lr in (1e-3, 3e-3)
    }
    ranked = sorted(means, key=lambda lr: -means[lr])
    lines = [line for line in text.splitlines() if "mean gain" in line]
    labels = [line.split(":")[0].strip() for line in lines]
    assert labels == [f"learning_rate={lr}" for lr in ranked]
    for line, lr in zip(lines, ranked, strict=True):
        assert f"mean gain {means[lr]:+.3f} over 2 seeds" in line
    assert "correct_given_format gain on unseen facts" in text


# -- 07_sandboxed_rollouts -------------------------------------------------------------------

NOTEBOOK_07 = "07_sandboxed_rollouts.ipynb"
SLOW_REPLY = "</think>```bash\\nsleep 30; awk '{s += $1} END {print s}' numbers.txt > sum.txt\\n```"
PLANTED = (
    "wc -l < numbers.txt > sum.txt; mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt;"
    " chmod 444 /logs/verifier/reward.txt"
)
HARBOR = "tinker_cookbook.recipes.harbor_rl.harbor_tools"
BY_HARBOR_REWARD = "lambda box: HarborReward(task.tests_dir, box)([])"
NEW_ROWS = f"""
    "fake the grade": (TAMPER, 5, graded),
    "planted reward, run_verifier": ({PLANTED!r}, 5, graded),
    "planted reward, HarborReward": ({PLANTED!r}, 5, {BY_HARBOR_REWARD}),
    "cat /etc/shadow": ("cat /etc/shadow", 5, None),
    "kill -9 1": ("kill -9 1", 5, None),
}}"""
PROBE_07 = """{
    "rollouts": [
        [t.transitions[0].logs.get("script"), t.transitions[0].metrics.get("command_exit_code"),
         t.transitions[0].logs["verifier"], reward]
        for t, reward in zip(group.trajectories_G, group.get_total_rewards(), strict=True)
    ],
    "timings": timings,
    "containment": json.loads(containment.to_json(orient="index")),
    "metrics": [json.loads(line) for line in run.metrics_path.read_text().splitlines()],
}"""
# The training section at its smallest: the bullets do not touch it, but it runs.
SMALL_TRAINING_07 = {"steps": 2, "groups_per_step": 2, "eval_tasks": 2, "eval_samples": 1}


@pytest.fixture(scope="module")
def edited_07(folders, tmp_path_factory) -> tuple[nbformat.NotebookNode, dict]:
    """All five bullets in one run: they change different cells. A slow reply and
    `command_timeout=5` (the rollout cell); `simulated_boot_seconds = 2` (the creation
    cell); two planted-reward rows, one per grader, and `cat /etc/shadow` and `kill -9 1`
    rows (the containment cell); and `metrics.jsonl`, read back (the probe)."""
    folder = folder_for(folders, tmp_path_factory, "07")
    edits = [
        ("SCRIPTED_REPLIES = [", '1000.",\n]', f'1000.",\n    "{SLOW_REPLY}",\n]'),
        ("builder = ShellTaskGroupBuilder(", "command_timeout=20", "command_timeout=5"),
        (
            "escapes = {",
            "# @needs_sandbox\n",
            f"# @needs_sandbox\nfrom {HARBOR} import HarborReward\n",
        ),
        ("escapes = {", '"fake the grade": (TAMPER, 5, graded),\n}', NEW_ROWS.lstrip("\n")),
    ]
    notebook = with_probe(NOTEBOOK_07, folder, PROBE_07, edits)
    parameters = {"simulated_boot_seconds": 2, **SMALL_TRAINING_07}
    executed = succeeded(run(notebook, folder / "out.ipynb", parameters, kernel_env(folder)))
    assert not error_outputs(executed)
    return executed, probe(executed)


def test_07_a_correct_but_slow_script_is_killed_at_command_timeout_and_earns_0(edited_07) -> None:
    rollouts = edited_07[1]["rollouts"]
    assert len(rollouts) == 8
    slow = [r for r in rollouts if (r[0] or "").startswith("sleep 30")]
    assert len(slow) == 1, "the bullet says seed 0 draws the slow reply once in 8 rollouts"
    for _, exit_code, verifier, reward in slow:
        assert exit_code == 124 and reward == 0.0  # killed at its timeout, before writing
        assert "FAIL: /app/sum.txt does not exist" in verifier


def test_07_a_planted_reward_fools_harbor_reward_and_not_run_verifier(edited_07) -> None:
    rows = edited_07[1]["containment"]
    assert rows["planted reward, run_verifier"]["afterwards"] == "graded reward 0.0"
    assert rows["planted reward, HarborReward"]["afterwards"][0] == 1.0


def test_07_two_second_boots_cost_8_boots_one_after_another(edited_07) -> None:
    executed, seen = edited_07
    text = printed(executed, "for creation in (")
    for creation in ("sequential", "concurrent"):
        assert f"{creation:10s}: 8 sandboxes ready in" in text
    # One boot after another: at least 8 boots (the notebook asserts this lower bound too);
    # together, the group waits for about one, so concurrent creation wins by far.
    assert seen["timings"]["sequential"] >= 8 * 2
    assert seen["timings"]["concurrent"] < seen["timings"]["sequential"] / 2


def test_07_metrics_jsonl_has_a_line_per_step_with_reward_and_bash_block_rates(edited_07) -> None:
    metrics = edited_07[1]["metrics"]
    assert [m["step"] for m in metrics] == list(range(SMALL_TRAINING_07["steps"]))
    for m in metrics:
        assert 0 <= m["has_bash_block"] <= 1 and 0 <= m["reward"] <= 1


def test_07_reading_etc_shadow_fails_and_kill_9_1_does_nothing(edited_07) -> None:
    rows = edited_07[1]["containment"]
    shadow, kill = rows["cat /etc/shadow"], rows["kill -9 1"]
    assert shadow["exit code"] == 1 and "Permission denied" in shadow["stderr (telling line)"]
    assert kill["exit code"] == 0 and kill["stderr (telling line)"] == ""  # not even an error


# -- 08_ship_the_adapter ---------------------------------------------------------------------

NOTEBOOK_08 = "08_ship_the_adapter.ipynb"
SMALL_08 = {"parity_problems": 2, "table_problems": 4, "keep_on_sail": True, "run_name": "longer"}
# What the second and third bullets say to type, in their order: list, rank 64, delete.
STEPS_08 = """
loras = await sail_request("GET", "/v1/loras")
files = await sail_request("GET", "/v1/files")

bad_config = adapter_dir / "rank64.json"
bad_config.write_text(json.dumps({**peft_config, "r": 64}))
bad_id = await upload_file(bad_config)
await create_lora(f"{lora_name}-r64", course.model_name, bad_id, weights_file_id)
from helpers.sail_http import LoraNotUsable
try:
    await wait_for_validation(f"{lora_name}-r64", course.model_name)
    bad = None
except LoraNotUsable as error:
    bad = str(error)
await sail_request("DELETE", "/v1/loras/{name}", path_args={"name": f"{lora_name}-r64"})
await sail_request("DELETE", "/v1/files/{id}", path_args={"id": bad_id})

await sail_request("DELETE", "/v1/loras/{name}", path_args={"name": lora_name})
await sail_request("DELETE", "/v1/files/{id}", path_args={"id": config_file_id})
await sail_request("DELETE", "/v1/files/{id}", path_args={"id": weights_file_id})
"""
PROBE_08 = """{
    "loras": [lora["name"] for lora in loras["data"]],
    "files": [file["id"] for file in files["data"]],
    "kept": [lora_name, config_file_id, weights_file_id],
    "bad": bad,
    "left": (await sail_request("GET", "/v1/loras"))["data"]
    + (await sail_request("GET", "/v1/files"))["data"],
    "table_rows": len(results),
}"""


@pytest.fixture(scope="module")
def longer_run_shipped(folders, tmp_path_factory) -> tuple[Path, nbformat.NotebookNode, dict]:
    """Try this: notebook 04 with `run_name = "longer"` (3 steps here, not 150), then this
    notebook with `run_name = "longer"`; in the same run, `keep_on_sail = True` and then what
    the keep-on-Sail and rank-64 bullets say to type, after the clean-up cell."""
    folder = folder_for(folders, tmp_path_factory, "08")
    env = kernel_env(folder)
    trained = {"steps": 3, "group_size": 2, "groups_per_step": 4, "eval_problems": 2}
    succeeded(
        run("04_training_loop.ipynb", folder / "04.ipynb", {**trained, "run_name": "longer"}, env)
    )
    notebook = with_probe(NOTEBOOK_08, folder, PROBE_08, steps=STEPS_08)
    executed = succeeded(run(notebook, folder / "08.ipynb", SMALL_08, env))
    assert not error_outputs(executed)
    return folder, executed, probe(executed)


def test_08_ships_the_longer_runs_adapter(longer_run_shipped) -> None:
    folder, executed, seen = longer_run_shipped
    checkpoint = json.loads((folder / "runs" / "longer" / "state.json").read_text())["checkpoint"]
    shipped = printed(executed, "found = run_checkpoint(run_name)")
    assert f"shipping the adapter of run 'longer' after 3 steps ({checkpoint})" in shipped
    assert "training" not in shipped  # nothing trained here: the run's adapter is used
    table = printed(executed, "better = (results[")
    assert "mean reward on 4 held-out problems" in table and seen["table_rows"] == 4


def test_08_keep_on_sail_leaves_the_lora_and_its_files_until_deleted(longer_run_shipped) -> None:
    _, executed, seen = longer_run_shipped
    lora_name, config_id, weights_id = seen["kept"]
    kept = printed(executed, "if keep_on_sail:")
    assert f"kept on Sail: LoRA {lora_name!r}, files {config_id} and {weights_id}" in kept
    assert lora_name in seen["loras"] and {config_id, weights_id} <= set(seen["files"])
    assert seen["left"] == []  # the deletes the bullet lists leave nothing (rank-64's too)


def test_08_a_rank_64_config_fails_validation(longer_run_shipped) -> None:
    bad = longer_run_shipped[2]["bad"]  # LoraNotUsable's message: Sail's status and reason
    assert "is 'failed' for" in bad and "invalid_rank: " in bad
    assert "rank [64]; ranks must be integers from 1 to 32" in bad


def test_08_a_lora_name_with_capitals_stops_in_the_check_cell(folders, tmp_path_factory) -> None:
    """Try this: `lora_name = "Course_Adapter"`."""
    folder = folder_for(folders, tmp_path_factory, "08-name")
    executed = run(
        NOTEBOOK_08, folder / "out.ipynb", {"lora_name": "Course_Adapter"}, kernel_env(folder)
    )
    assert executed.metadata["exit_code"] != 0
    [(cell, error)] = [
        (c, o) for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"
    ]
    assert "check_params(" in cell.source  # the first cell after the parameters
    assert error.ename == "CourseConfigError" and len(error.traceback) == 1
    assert "2-64 characters of a-z, 0-9 and '-'" in error.evalue
    assert error.evalue.count(". ") == 0 and error.evalue.endswith(".")  # one sentence
    assert not (folder / "stack").exists()  # it stopped before connecting
