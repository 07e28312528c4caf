"""Issue 28, a reader's second pass over a fresh-clone `make run`: each defect that code can
check, held here. Rendered sentences are checked by running their cell's source on made-up
values (both outcomes where the text branches); claims about sources against the sources."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import nbformat
import numpy as np
import pytest
from IPython.display import Markdown
from tinker.lib.public_interfaces.training_client import TrainingClient
from tinker_cookbook.hyperparam_utils import get_lora_param_count
from tinker_cookbook.rl import train as cookbook_train

from helpers.adapter_export import KIMI_K26, estimate_kimi_k26
from helpers.cost import ASSUMED_ADAPTER_ARCHIVE_GB, ASSUMED_ADAPTER_PARAMETERS
from helpers.scoring import MathEnv
from helpers.serving import SnapshotCompleter
from helpers.training import bootstrap_interval
from sweeps.compare import gain_half_width

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "instructor.md").read_text()


def cell(notebook: str, cell_id: str) -> str:
    cells = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4).cells
    return next(c.source for c in cells if c.get("id") == cell_id)


def guide_section(name: str) -> str:
    return GUIDE.split(f"### {name}", 1)[1].split("\n### ", 1)[0]


def flat(text: str) -> str:
    return " ".join(text.split())


# -- 1. notebook 04's loophole section --


def loophole_counts(skip_first: int, skip_last: int, paid: int, in_full: int) -> dict:
    """60 steps of 64 rollouts for each grader: the skips go from skip_first to skip_last per
    step; the guide's grader pays `paid` of them per step, `in_full` of those in full."""

    def counts(guide: bool) -> list[dict]:
        return [
            {
                "step": step,
                "rollouts": 64,
                "skipped": skip_first if step < 30 else skip_last,
                "skipped_and_paid": paid if guide else 0,
                "skipped_and_paid_in_full": in_full if guide else 0,
                "well_formed": 60,
            }
            for step in range(60)
        ]

    return {"steps": 60, "counts": {"guide's grader": counts(True), "fixed grader": counts(False)}}


def rendered_loophole(loophole: dict) -> str:
    namespace = {"np": np, "Markdown": Markdown, "loophole": loophole}
    exec(cell("04_training_loop", "cell-33c"), namespace)
    return "\n".join(namespace["lines"])


@pytest.mark.parametrize(("skip_first", "skip_last"), [(1, 8), (2, 2)], ids=["rose", "flat"])
def test_04_loophole_renders_what_the_guide_grader_paid_and_caveats_its_band(
    skip_first: int, skip_last: int
) -> None:
    text = flat(rendered_loophole(loophole_counts(skip_first, skip_last, paid=1, in_full=0)))
    rose = skip_last > skip_first
    assert ("the skip rate rose" in text) == rose
    assert "optimistic (too narrow)" in text  # in either branch
    assert "60 cut-off answers earned 0.9" in text and "0 that stopped cleanly" in text
    assert "a skip pays no more than a closed" not in text


def test_04_loophole_prose_says_what_each_case_pays() -> None:
    prose = cell("04_training_loop", "cell-33d")
    assert "earns what a closed one earns" not in prose and "would not warn you" not in prose
    assert "full reward" in prose and "0.9" in prose and "cut-off kind only" in prose
    bullet = guide_section("04_training_loop").split("- Optional loophole section", 1)[1]
    bullet = flat(bullet.split("\n- ", 1)[0].split("**What to watch for.**", 1)[0])
    assert "the skip rate rose" in bullet and "stayed within its noise" in bullet
    assert "0.9" in bullet and "optimistic" in bullet


# -- 2, 3 and 13. notebook 05 --


@pytest.mark.parametrize("problems", [30, 100])
def test_05_and_04_intervals_agree_closely_as_05_says(problems: int) -> None:
    """05's standard-error interval and 04's problem bootstrap, both clustered by problem, give
    nearly the same width on problems of mixed difficulty (4 samples each)."""
    assert "same method as notebook 04" not in cell("05_compare_runs", "cell-08")
    assert "nearly the same width" in cell("05_compare_runs", "cell-08")
    rng = np.random.default_rng(problems)
    difficulty = rng.uniform(0.05, 0.6, problems)

    def scored(p_correct: np.ndarray) -> list[dict]:
        correct = rng.binomial(4, p_correct)
        well_formed = np.maximum(correct, rng.binomial(4, 0.9, problems))
        return [
            {"samples": 4, "correct": int(c), "format": int(f), "correct_and_format": int(c),
             "reward": float(c - 0.1 * (4 - f))}
            for c, f in zip(correct, well_formed, strict=True)
        ]  # fmt: skip

    before, after = scored(difficulty), scored(np.minimum(difficulty + 0.1, 1))
    low, high = bootstrap_interval(before, after)["correct"]
    standard_error = gain_half_width({"problems": before}, {"problems": after}, "correct")
    assert standard_error == pytest.approx((high - low) / 2, rel=0.15)


def test_05_compares_the_seed_spread_with_one_runs_standard_error() -> None:
    assert "larger than one run's interval" not in cell("05_compare_runs", "cell-11")
    source = cell("05_compare_runs", "cell-12")
    assert "one_run = half_width / interval_quantile(problems - 1)" in source
    assert "spread > one_run" in source  # like for like: two standard deviations


def test_05_gain_figure_labels_its_shared_axis_once_by_setting() -> None:
    source = cell("05_compare_runs", "cell-10")
    assert "sharey=True" in source and "list(rows.index)" not in source
    assert "describe(by_name[run_name], settings)" in source
    assert source.count("set_yticks") == 1 and source.count("invert_yaxis") == 1


# -- 4, 5, 10 and 14. the instructor guide --


def test_guide_says_04_asserts_only_pass_at_16() -> None:
    section = flat(guide_section("04_training_loop"))
    assert "asserts only that known-fact pass@1 rose" not in section
    assert "asserts only that known-fact pass@16 did not rise" in section
    checked = cell("04_training_loop", "pass-at-k-checked")
    assert checked.count("assert ") == 1 and "[-1]" in checked


def measured_gains() -> dict:
    source = cell("04_training_loop", "gains-measured-rendered").split("\n\n\ndef ", 1)[0]
    namespace: dict = {}
    exec(source, namespace)
    return namespace


def test_guide_faq_on_unseen_facts_cites_04s_measured_constants() -> None:
    measured = measured_gains()
    faq = flat(GUIDE.split("## Questions attendees ask", 1)[1].split("\n**", 2)[1])
    assert "memorising)" not in faq and "0.96–0.99" not in faq
    assert measured["MEASURED_ON"] in faq and "scripts/held_out_gains.py" in faq
    rows = measured["MEASURED_GAINS"]
    for name in ("known facts, not trained", "unseen facts"):
        gains = [gain for _, _, gain, *_ in rows[name]]
        above = sum(low > 0 for *_, low, _, _, _ in rows[name])
        assert f"{min(gains):+.3f} to {max(gains):+.3f}" in faq, name
        assert f"above 0 in {above} of {len(gains)}" in faq, name
        well_formed = np.mean([a / fa - b / fb for b, a, *_, fb, fa in rows[name]])
        assert f"{well_formed:+.3f}" in faq, name
    every = [row for set_rows in rows.values() for row in set_rows]
    assert f"near {np.mean([row[5] for row in every]):.1f}" in faq
    assert f"{min(row[6] for row in every):.2f}–{max(row[6] for row in every):.2f}" in faq
    assert f"{measured['BASE_UNSEEN_PASS_AT_16']:.3f}" in faq


def test_guide_run_times_add_up_to_what_step_4_says() -> None:
    plan = GUIDE.split("## Timed plan", 1)[1].split("\nCore-path reading time", 1)[0]
    seconds = [float(s) for s in re.findall(r"^\|[^|]+\| ([\d.]+) s \|", plan, re.MULTILINE)]
    assert len(seconds) == 9  # the sweep and the eight notebooks
    step_4 = flat(GUIDE.split("4. **Warm up once:**", 1)[1].split("\n5. ", 1)[0])
    assert f"add up to {sum(seconds) / 60:.1f} minutes" in step_4
    assert f"{seconds[0] / 60:.1f} for the sweep" in step_4
    assert f"{seconds[4] / 60:.1f} for the training loop" in step_4
    assert "2026-12-02" in plan and "load" in plan


def test_guide_03_ranges_come_from_the_named_script_with_grad_norm() -> None:
    section = flat(guide_section("03_one_grpo_step"))
    assert "`optim/grad_norm` about 98" not in section
    assert "scripts/one_step_spread.py" in section and "grad_norm" in section
    assert "grad_norm" in (ROOT / "scripts" / "one_step_spread.py").read_text()


# -- 6. Sail's downloads --


def test_snapshot_completer_states_only_what_is_known_of_sails_downloads() -> None:
    doc = flat(SnapshotCompleter.__doc__)
    assert "when the first request arrives" not in doc
    assert "not documented" in doc and "every request" in doc


# -- 7, 8, 9 and 12. notebooks 01 and 03 --


def test_01_says_what_being_wrong_and_bad_format_cost() -> None:
    text = cell("01_scoring", "cell-26")
    assert "A wrong answer (0) costs more than bad formatting" not in text
    assert "a full point" in text and "a further 0.1" in text


def test_01_penalty_lives_where_the_exercise_says() -> None:
    assert "0.1 * (1.0 - correct_format)" in inspect.getsource(MathEnv.scored)
    assert "in `MathEnv.scored` (the `0.1 * (1.0 - correct_format)`)" in cell(
        "01_scoring", "cell-30"
    )
    assert "penalty from 0.1 to 0.5 in `MathEnv.scored`" in guide_section("01_scoring")


@pytest.mark.parametrize(("v1", "pushed"), [(-2.3e-5, "up"), (3.4e-4, "down")])
def test_03_direction_comes_from_v1s_sign_not_from_v2(v1: float, pushed: str) -> None:
    namespace = {
        "mean_positive": 0.04,
        "mean_negative": -0.02,
        "kl_after": {"optim/kl_sample_train_v1": v1, "optim/kl_sample_train_v2": 1.2e-4},
    }
    source = cell("03_one_grpo_step", "sides-rendered")
    exec(source.rsplit("\nMarkdown(", 1)[0], namespace)
    text = flat(
        eval("Markdown(" + source.rsplit("\nMarkdown(", 1)[1], {**namespace, "Markdown": str})
    )
    other = "up" if pushed == "down" else "down"
    assert f"pushed {pushed} than {other}" in text
    assert "above v2" not in text and "below v2" not in text


def test_03_names_the_cookbooks_default_loss_not_tinkers() -> None:
    text = cell("03_one_grpo_step", "3f155921")
    assert "Tinker's default" not in text and "tinker_cookbook/rl/train.py" in text
    assert (
        inspect.signature(cookbook_train.Config).parameters["loss_fn"].default
        == "importance_sampling"
    )
    loss_fn = inspect.signature(TrainingClient.forward_backward).parameters["loss_fn"]
    assert loss_fn.default is inspect.Parameter.empty


# -- 11. one size for the Kimi K2.6 adapter --


@pytest.mark.parametrize("rank", [1, 8, 32, 64])
def test_kimi_adapter_size_is_the_cookbooks(rank: int) -> None:
    assert estimate_kimi_k26(rank).parameters == get_lora_param_count(KIMI_K26, lora_rank=rank)


def test_every_mention_of_the_kimi_adapter_size_is_the_one_figure() -> None:
    kimi = estimate_kimi_k26(32)
    assert ASSUMED_ADAPTER_PARAMETERS == kimi.parameters
    assert kimi.archive_bytes / 1e9 == ASSUMED_ADAPTER_ARCHIVE_GB
    gigabytes, billions = (
        f"{kimi.archive_bytes / 1e9:.1f} GB",
        f"{kimi.parameters / 1e9:.1f} billion",
    )
    for doc in ("instructor.md", "cloud.md"):
        text = flat((ROOT / "docs" / doc).read_text())
        stated = re.findall(r"about (\d+\.\d) GB (?:each|for a rank-32)", text)
        stated += re.findall(r"\(about (\d+\.\d) GB each, assumed\)", text)
        assert stated and {f"{s} GB" for s in stated} == {gigabytes}, doc
        assert set(re.findall(r"(\d+\.\d) billion", text)) <= {billions.split()[0]}, doc
    assert "estimate_kimi_k26(rank)" in cell("08_ship_the_adapter", "2b718c68")
