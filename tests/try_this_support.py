"""The "Try this" exercises: which test executes each bullet of each notebook, and a way to run
a notebook's own cells in this process with the edit a bullet describes.

`TRY_THIS` maps, per notebook, a phrase that names one bullet of its "## Try this" section to
the tests that run that bullet at the settings it states, or check its solution in
docs/instructor.md (`path::function`, a parametrised id allowed). A run may also make another
bullet's change where that touches a different cell; it may not change what the bullet states.
tests/repo/test_try_this_registry.py fails when a bullet has no entry, an entry names no
bullet, or a named test does not exist. Add the entry when you add or reword a bullet.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import io
import json
import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"

_GUIDE = "tests/repo/test_instructor_guide.py"
_RESULTS = "tests/notebooks/test_results.py"
_EXERCISES = "tests/long/test_exercises.py"
_PIPELINING = "tests/notebooks/test_pipelining.py"
_PIPELINING_TRY = "tests/long/test_pipelining_try_this.py"
_TRY_01 = "tests/course/test_try_this_01.py"
_TRY_02 = "tests/course/test_try_this_02.py"
_TRY_09 = "tests/course/test_try_this_09.py"
_TRY_06 = "tests/long/test_try_this_06.py"
_CLOUD_04 = "tests/long/test_try_this_04_cloud.py"
_RUNS_09 = "tests/long/test_try_this_09_runs.py"

TRY_THIS: dict[str, dict[str, tuple[str, ...]]] = {
    "01_scoring": {
        "Add your own row to `cases`": (
            f"{_TRY_01}::test_own_rows_score_as_the_guide_says",
            f"{_GUIDE}::test_scoring_solutions",
        ),
        "Add to `orca_style_answers`": (
            f"{_TRY_01}::test_the_guides_reference_fools_final_answer_in_the_table",
            f"{_GUIDE}::test_the_guides_fooling_reference_fools_final_answer",
        ),
        "Change `example_index`": (
            f"{_TRY_01}::test_another_example_index_changes_the_question_not_the_template",
        ),
        "Change the penalty from 0.1 to 0.5": (
            f"{_TRY_01}::test_a_penalty_of_half_moves_only_the_badly_formed_rows",
        ),
    },
    "02_snapshot_and_serve": {
        "Set `group_size` to 32, raise `temperature` to 1.5": (
            f"{_TRY_02}::test_hotter_sampling_draws_less_likely_tokens",
        ),
        "Set `max_tokens` to 8": (
            f"{_TRY_02}::test_eight_tokens_cut_every_sample_off_at_minus_a_tenth",
            f"{_GUIDE}::test_eight_tokens_stop_on_length_and_pay_the_format_penalty",
        ),
        'Change `"target_modules"`': (
            f"{_TRY_02}::test_other_target_modules_are_refused_and_a_deleted_checkpoint_is_404",
        ),
        "Delete the policy's checkpoint": (
            f"{_TRY_02}::test_other_target_modules_are_refused_and_a_deleted_checkpoint_is_404",
        ),
    },
    "03_one_grpo_step": {
        "Set `temperature = 0.7`": (
            f"{_EXERCISES}::test_03_temperature_07_moves_the_weights_off_1_and_the_kl_jumps",
        ),
        "Set `learning_rate = 3e-4`": (
            f"{_EXERCISES}::test_03_learning_rate_3e4_moves_both_sides_further_and_the_kl_grows",
        ),
        "change `max` to `min`": (
            f"{_EXERCISES}::test_03_min_instead_of_max_shows_a_negative_advantage",
        ),
        "Set `seed = 1`": (
            f"{_EXERCISES}::test_03_seed_1_draws_other_problems_and_every_check_holds",
        ),
        "Compare `importance_sampling` with `ppo`": (
            "tests/long/test_ppo_try_this.py::test_ppo_and_importance_sampling_differ_on_stale_samples",
        ),
        'set `backend = "cloud"`': (
            "tests/notebooks/test_one_grpo_step_cloud.py::test_cloud_backend_runs_unchanged_against_the_local_stack",
        ),
    },
    "04_training_loop": {
        "Interrupt the kernel": (
            "tests/long/test_try_this_04_interrupt.py::test_an_interrupted_loop_resumes_where_it_stopped_and_logs_each_step_once",
            # "(or restart it)": a kernel killed mid-step, rerun
            "tests/notebooks/test_resume.py::test_04_resumes_exactly_from_each_crash_window",
        ),
        "once more, unchanged": (
            f"{_RESULTS}::test_rerunning_a_finished_run_prints_identical_numbers",
        ),
        "Set `group_size = 2`": (
            f"{_RESULTS}::test_try_group_size_2_gives_more_degenerate_groups",
        ),
        "Multiply the learning rate by 10": (
            f"{_RESULTS}::test_try_learning_rate_x10_trains_with_ten_times_the_step",
            f"{_CLOUD_04}::test_the_bullets_rates_are_ten_times_each_backends_default",
            f"{_CLOUD_04}::test_cloud_learning_rate_x10_trains_with_that_rate",
        ),
        "Set `temperature = 0.5`": (f"{_RESULTS}::test_try_temperature_half_samples_surer_tokens",),
        "Change `split_degenerate_groups`": (
            "tests/notebooks/test_loop_pieces.py::test_an_edited_piece_is_the_one_the_loop_runs",
        ),
    },
    "05_did_it_learn": {
        "Evaluate another run of notebook 04": (
            f"{_RESULTS}::test_05_evaluates_another_run_and_names_what_to_run_first",
        ),
        "Run this notebook once more, unchanged": (
            f"{_RESULTS}::test_rerunning_a_finished_run_prints_identical_numbers",
        ),
    },
    "10_reward_hacking": {
        "Run the notebook once more, unchanged": (
            "tests/long/test_loophole.py::test_the_loophole_notebook_renders_its_counts_at_the_defaults",
        ),
    },
    "06_compare_runs": {
        '`runs = "seeds3-*"`': (
            f"{_TRY_06}::test_three_seeds_measure_the_spread_with_more_freedom",
        ),
        '`metric = "correct_given_format"`': (
            f"{_TRY_06}::test_metric_correct_given_format_ranks_the_learning_rates_by_it",
        ),
        "Interrupt `make sweep`": (
            f"{_EXERCISES}::test_05_ctrl_c_then_again_runs_only_the_unfinished_runs",
        ),
        "Set `smoothing = 1`": (
            f"{_TRY_06}::test_smoothing_sets_the_window_of_each_runs_bold_curve[1]",
            f"{_TRY_06}::test_smoothing_sets_the_window_of_each_runs_bold_curve[20]",
        ),
    },
    "07_faster_loops": {
        "Set `train_latency_s = 0.5`": (
            f"{_PIPELINING_TRY}::test_try_this_shorter_training_predicts_from_its_own_s_and_t",
        ),
        "Set `max_staleness = 6`": (
            f"{_PIPELINING_TRY}::test_try_this_six_steps_stale_drifts_further_than_one",
        ),
        "Set `flex_latency_s = 5`": (
            f"{_PIPELINING_TRY}::test_try_this_slow_flex_window_says_which_side_waits",
        ),
        'Run with `backend = "cloud"`': (
            f"{_PIPELINING}::test_notebook_runs_unchanged_on_the_cloud_path",
        ),
    },
    "08_sandboxed_rollouts": {
        "correct but slow": (
            f"{_EXERCISES}::test_07_a_correct_but_slow_script_is_killed_at_command_timeout_and_earns_0",
        ),
        "plants a reward": (
            f"{_EXERCISES}::test_07_a_planted_reward_fools_harbor_reward_and_not_run_verifier",
        ),
        "Set `simulated_boot_seconds = 2`": (
            f"{_EXERCISES}::test_07_two_second_boots_cost_8_boots_one_after_another",
        ),
        "`cat /etc/shadow`": (
            f"{_EXERCISES}::test_07_reading_etc_shadow_fails_and_kill_9_1_does_nothing",
        ),
        "Plot `has_bash_block`": (
            f"{_EXERCISES}::test_07_metrics_jsonl_has_a_line_per_step_with_reward_and_bash_block_rates",
        ),
    },
    "09_ship_the_adapter": {
        'Set `lora_name = "Course_Adapter"`': (
            f"{_EXERCISES}::test_08_a_lora_name_with_capitals_stops_in_the_check_cell",
            f"{_GUIDE}::test_a_lora_name_with_capitals_stops_in_one_sentence",
            f"{_TRY_09}::test_a_made_up_name_starts_with_the_prefix_and_the_connect_cell_prints_it",
        ),
        "Set `keep_on_sail = True`": (
            f"{_RUNS_09}::test_keep_on_sail_lists_the_lora_and_its_files_until_deleted",
        ),
        "a config that claims rank 64": (
            f"{_RUNS_09}::test_a_rank_64_config_fails_validation_with_sails_reason",
            f"{_GUIDE}::test_a_rank_64_config_fails_as_the_guide_says",
        ),
        '`run_name = "longer"` and `steps = 150`': (
            f"{_RUNS_09}::test_a_150_step_run_is_shipped_and_compared",
        ),
    },
}


def try_this_bullets(notebook: Path) -> list[str]:
    """The top-level bullets of the notebook's "## Try this" section, each with its
    continuation lines (an indented code block belongs to its bullet)."""
    cells = json.loads(notebook.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    section = re.split(r"^## Try this\s*$", text, flags=re.M)[-1]
    section = re.split(r"^#", section, maxsplit=1, flags=re.M)[0]
    bullets: list[str] = []
    for line in section.splitlines():
        if line.startswith("- "):
            bullets.append(line[2:])
        elif bullets and line.startswith(" "):
            bullets[-1] += "\n" + line
    return bullets


def defined_tests(path: Path) -> set[str]:
    """The test functions a test file defines, found by parsing it: `name` at module level,
    `Class::name` in a class."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            for child in node.body:
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                    names.add(f"{node.name}::{child.name}")
    return {name for name in names if name.split("::")[-1].startswith("test_")}


# -- a notebook's cells, run in this process ----------------------------------------------


@dataclass
class Cells:
    """What a notebook's cells left behind when run in this process."""

    namespace: dict
    printed: str


def edited_cells(
    notebook: str, edits: list[tuple[str, str, str]] = ()
) -> list[nbformat.NotebookNode]:
    """The notebook's cells, each (cell needle, old, new) replacement made in the one code
    cell whose source contains the needle, as a bullet tells a learner to."""
    cells = nbformat.read(NOTEBOOKS / notebook, as_version=4).cells
    for needle, old, new in edits:
        [cell] = [c for c in cells if c.cell_type == "code" and needle in c.source]
        assert old in cell.source, (needle, old)
        cell.source = cell.source.replace(old, new, 1)
    return cells


def run_cells(
    notebook: str,
    parameters: dict | None = None,
    edits: list[tuple[str, str, str]] = (),
    until: str | None = None,
    then: str = "",
) -> Cells:
    """Run the notebook's code cells in this process, top to bottom, as a kernel would
    (top-level `await` included, on one event loop), with `parameters` set after the
    parameters cell, as papermill sets them. Stops after the code cell whose source contains
    `until`, if given, and then runs `then` as one more cell (what a bullet says to type). A
    cell that raises raises here."""
    namespace: dict = {"__name__": "__main__"}
    printed = io.StringIO()
    loop = asyncio.new_event_loop()
    try:
        with contextlib.redirect_stdout(printed):
            cells = [c for c in edited_cells(notebook, edits) if c.cell_type == "code"]
            if until is not None:
                [last] = [i for i, c in enumerate(cells) if until in c.source]
                cells = cells[: last + 1]
            if then:
                cells.append(nbformat.v4.new_code_cell(then))
            for cell in cells:
                code = compile(cell.source, notebook, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                result = eval(code, namespace)  # noqa: S307 (the course's own cells)
                if asyncio.iscoroutine(result):
                    loop.run_until_complete(result)
                if "parameters" in cell.metadata.get("tags", []):
                    namespace.update(parameters or {})
    finally:
        loop.close()
    return Cells(namespace, printed.getvalue())
