"""Issue 28, a reader's second pass over a fresh-clone `make run`: each defect that code can
check, held here without pinning prose (issue 30). A cell that renders a claim is run on
made-up values, both outcomes where it branches, and what it renders is checked against
numbers worked out here; a figure is built and its axes inspected; a number in the guide is
checked against the constant or the code it comes from. Where the defect was a false sentence,
that sentence must stay absent; wording is checked only where nothing else can hold a fact,
and then by one key term."""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import matplotlib.pyplot as plt
import nbformat
import numpy as np
import pytest
from IPython.display import Markdown
from tinker.lib.public_interfaces.training_client import TrainingClient
from tinker_cookbook.hyperparam_utils import get_lora_param_count
from tinker_cookbook.rl import train as cookbook_train

import sweeps.runs
from helpers.adapter_export import KIMI_K26, estimate_kimi_k26
from helpers.cost import ASSUMED_ADAPTER_ARCHIVE_GB, ASSUMED_ADAPTER_PARAMETERS
from helpers.notebook_parameters import NOTEBOOK_PARAMETERS
from helpers.scoring import GuideMathEnv, MathEnv
from helpers.serving import SnapshotCompleter
from helpers.stats import pass_at_k_curve
from helpers.training import bootstrap_interval
from kimi import offline_kimi_tokenizer
from sweeps.compare import gain_half_width
from tests.sweep_support import write_sweep_runs

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "instructor.md").read_text()
# Student's t at 97.5% for 49 degrees of freedom (50 problems), from a printed table.
T_975_49 = 2.0096


def cell(notebook: str, cell_id: str) -> str:
    cells = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4).cells
    return next(c.source for c in cells if c.get("id") == cell_id)


def guide_section(name: str) -> str:
    return GUIDE.split(f"### {name}", 1)[1].split("\n### ", 1)[0]


def flat(text: str) -> str:
    return " ".join(text.split())


def numbers(text: str) -> set[float]:
    """Every number written in `text` (a typographic minus read as one), thousands unsplit."""
    found = re.findall(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?", text.replace("−", "-"))
    return {float(n.replace(",", "")) for n in found}


def without_numbers(text: str) -> str:
    return re.sub(r"[-+−]?\d[\d.,e+-]*", "#", text)


def reward(correct: float, well_formed: float) -> float:
    return round(MathEnv("q", "a", None).scored(correct, well_formed).reward, 6)


# -- 1. notebook 04's loophole section --

LOOPHOLE_STEPS, ROLLOUTS = 60, 64


def loophole_counts(skip_first: int, skip_last: int, paid: int, in_full: int) -> dict:
    """Counts for 60 steps of 64 rollouts: under the guide's grader the skips per step go from
    skip_first (first half) to skip_last, `paid` of them paid as correct each step, `in_full`
    of those in full; under the fixed grader 4 skips a step, none paid."""

    def counts(skips: list[int], paid: int, in_full: int) -> list[dict]:
        return [
            {"step": step, "rollouts": ROLLOUTS, "skipped": skipped, "skipped_and_paid": paid,
             "skipped_and_paid_in_full": in_full, "well_formed": 60}
            for step, skipped in enumerate(skips)
        ]  # fmt: skip

    half = LOOPHOLE_STEPS // 2
    guide = counts([skip_first] * half + [skip_last] * half, paid, in_full)
    fixed = counts([4] * LOOPHOLE_STEPS, 0, 0)
    return {"steps": LOOPHOLE_STEPS, "counts": {"guide's grader": guide, "fixed grader": fixed}}


def loophole_cell(loophole: dict) -> dict:
    namespace = {"np": np, "Markdown": Markdown, "loophole": loophole}
    exec(cell("04_training_loop", "cell-33c"), namespace)
    return namespace


def rose_beyond_two_standard_errors(before: float, after: float, rollouts: int) -> bool:
    return after - before > 2 * math.sqrt((before * (1 - before) + after * (1 - after)) / rollouts)


@pytest.mark.parametrize(("skip_first", "skip_last"), [(5, 14), (6, 6)], ids=["rose", "flat"])
def test_04_loophole_renders_what_the_guide_grader_paid_and_caveats_its_band(
    skip_first: int, skip_last: int
) -> None:
    paid, in_full = 5, 2  # per step: 300 paid in all, 120 in full and 180 after a cut-off
    namespace = loophole_cell(loophole_counts(skip_first, skip_last, paid, in_full))
    text = flat("\n".join(namespace["lines"]))
    assert "a skip pays no more than a closed" not in text
    # The cell's own words for a rise and for no change, asked of its `direction`.
    window = 10  # steps at each end, of the 60
    rollouts = window * ROLLOUTS
    rise = namespace["direction"](0.0, 0.5, rollouts)
    steady = namespace["direction"](0.3, 0.3, rollouts)
    assert rise != steady
    rose = rose_beyond_two_standard_errors(skip_first / ROLLOUTS, skip_last / ROLLOUTS, rollouts)
    assert rose == (skip_last > skip_first)  # the made-up counts are what their id says
    assert (rise in text) == rose and steady in text  # the fixed grader's never moves
    skipped = LOOPHOLE_STEPS // 2 * (skip_first + skip_last)
    stated = numbers(text)
    cut_off_pay = reward(correct=1, well_formed=0)
    paid_in_all = [LOOPHOLE_STEPS * n for n in (paid, in_full, paid - in_full)]
    assert {skipped, *paid_in_all, cut_off_pay} <= stated
    assert "optimistic" in text  # the band's caveat, in either branch


def guide_score(completion: str, renderer) -> tuple[float, float]:
    env = GuideMathEnv("What is 12 plus 2?", "12 + 2 = 14.", renderer)
    result = asyncio.run(env.step(offline_kimi_tokenizer().encode(completion)))
    return round(result.reward, 6), result.metrics["format"]


def test_04_loophole_prose_says_what_each_case_pays(renderer) -> None:
    """The guide's grader, run on a skip that stopped cleanly and on one cut off, pays what
    notebook 04's prose and the guide's loophole bullet say, and its format rate sees only the
    cut-off kind; the bullet gives more than one run's outcome."""
    clean, clean_format = guide_score(r"12 + 2 = 14 so \boxed{14}<|im_end|>", renderer)
    cut_off, cut_off_format = guide_score(r"12 + 2 = 14 so \boxed{14} hmm let me", renderer)
    assert (clean, clean_format) == (reward(1, 1), 1) and cut_off_format == 0
    assert reward(0, 1) < cut_off < clean  # a skip beats a clean wrong answer
    prose = cell("04_training_loop", "cell-33d")
    assert "earns what a closed one earns" not in prose and "would not warn you" not in prose
    assert cut_off in numbers(prose)
    section = guide_section("04_training_loop")
    (bullet,) = [b for b in section.split("\n- ") if "</think>" in b]
    bullet = flat(bullet.split("**What to watch for.**", 1)[0])
    assert cut_off in numbers(bullet) and "optimistic" in bullet
    # Its recorded skip rates (pairs below 0.5; format rates sit near 1) include a rise and a
    # run without one, by the notebook's own band over 10 steps at its defaults.
    parameters = NOTEBOOK_PARAMETERS["04_training_loop"]
    rollouts = 10 * parameters["group_size"].value * parameters["groups_per_step"].value
    direction = loophole_cell({})["direction"]
    pairs = re.findall(r"(\d\.\d+) → (\d\.\d+)", bullet)
    skip_rates = [(float(a), float(b)) for a, b in pairs if max(float(a), float(b)) < 0.5]
    rise = direction(0.0, 0.5, rollouts)
    moved = [direction(a, b, rollouts) for a, b in skip_rates]
    assert rise in moved and any(way != rise for way in moved), skip_rates


# -- 2, 3 and 13. notebook 05 --


@pytest.mark.parametrize("problems", [30, 100])
def test_05_and_04_intervals_agree_closely_as_05_says(problems: int) -> None:
    """05's standard-error interval and 04's problem bootstrap, both clustered by problem, give
    nearly the same width on problems of mixed difficulty (4 samples each)."""
    assert "same method as notebook 04" not in cell("05_compare_runs", "cell-08")
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


@pytest.fixture(scope="module")
def notebook_05(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """Notebook 05's cells up to its gain table, run in process on `make sweep`'s six runs
    (three learning rates, two seeds, three held-out sets of 50 problems), written by hand."""
    runs_dir = tmp_path_factory.mktemp("sweep") / "runs"
    write_sweep_runs(runs_dir, [])
    namespace: dict = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sweeps.runs, "find_runs", partial(sweeps.runs.find_runs, runs_dir=runs_dir))
        for cell_id in ("cell-01", "cell-03", "cell-05", "cell-07", "cell-09"):
            exec(cell("05_compare_runs", cell_id), namespace)
    plt.close("all")
    yield namespace
    plt.close("all")


def printed_by_05s_comparison(
    notebook_05: dict, half_width: float, capsys: pytest.CaptureFixture
) -> list[str]:
    """What 05's comparison cell prints when every run's interval is ±`half_width`."""
    table = notebook_05["table"].copy()
    table[f"{notebook_05['sets'][0]} ±"] = half_width
    capsys.readouterr()
    exec(cell("05_compare_runs", "cell-12"), {**notebook_05, "table": table})
    return capsys.readouterr().out.splitlines()


def test_05_compares_the_seed_spread_with_one_runs_standard_error(
    notebook_05: dict, capsys: pytest.CaptureFixture
) -> None:
    """Like for like: the spread between seeds (a standard deviation) is set against one run's
    standard error, its half-width over t, not against the half-width itself. A spread between
    the two reads as the spread well above both does, and not as one below both."""
    assert "larger than one run's interval" not in cell("05_compare_runs", "cell-11")
    # The spread between seeds, worked out here: each learning rate's two seeds' first-set
    # gains about their mean, pooled.
    table, runs = notebook_05["table"], {run.name: run for run in notebook_05["selected"]}
    by_rate: dict[float, list[float]] = {}
    for name, gain in table[f"{notebook_05['sets'][0]} gain"].items():
        by_rate.setdefault(runs[name].settings["learning_rate"], []).append(gain)
    squares = sum(float(((np.array(g) - np.mean(g)) ** 2).sum()) for g in by_rate.values())
    spread = math.sqrt(squares / sum(len(g) - 1 for g in by_rate.values()))
    assert spread > 0
    t = T_975_49  # every run scores 50 problems of each set
    printed = {}
    for case, standard_error in {"between": 0.6, "above": 0.3, "below": 1.5}.items():
        half_width = round(standard_error * spread * t, 3)
        assert (spread < half_width) == (case != "above")
        lines = printed_by_05s_comparison(notebook_05, half_width, capsys)
        assert any(abs(n - half_width / t) < 6e-4 for n in numbers("\n".join(lines))), lines
        printed[case] = [without_numbers(line) for line in lines]
    assert printed["between"] == printed["above"] != printed["below"]


def test_05_gain_figure_labels_its_shared_axis_once_by_setting(notebook_05: dict) -> None:
    """One y axis shared by the three held-out sets' panels, labelled once, by the settings that
    tell the runs apart (not by run names), with the largest gain on top in every panel."""
    namespace = dict(notebook_05)
    exec(cell("05_compare_runs", "cell-10"), namespace)
    axes = namespace["figure"].axes
    sets, table = notebook_05["sets"], notebook_05["table"]
    assert len(axes) == len(sets) == 3
    assert all(axes[0].get_shared_y_axes().joined(axes[0], ax) for ax in axes[1:])
    by_name = {run.name: run for run in notebook_05["selected"]}
    expected = [
        f"learning_rate={by_name[name].settings['learning_rate']}, "
        f"seed={by_name[name].settings['seed']}"
        for name in table.index
    ]
    assert [label.get_text() for label in axes[0].get_yticklabels()] == expected
    assert not any(ax.yaxis.get_tick_params()["labelleft"] for ax in axes[1:])
    for ax, name in zip(axes, sets, strict=True):
        assert ax.yaxis_inverted()  # position 0, the largest first gain, on top
        points = [c.lines[0].get_xydata() for c in ax.containers]
        assert [y for ((_, y),) in points] == list(range(len(table)))
        assert [x for ((x, _),) in points] == pytest.approx(list(table[f"{name} gain"]))
    plt.close(namespace["figure"])


# -- 4, 5, 10 and 14. the instructor guide --


def known_and_unseen(known_pass_at_16_rises: bool) -> dict:
    """pass@k gains as notebook 04 computes them, on made-up counts of 16 answers to each of
    20 problems: pass@1 falls on both sets; pass@16 rises on unseen facts, and on known facts
    only if asked (else every problem has a right answer before and after)."""
    rises = [{"samples": 16, "correct": 0}] * 10 + [{"samples": 16, "correct": 8}] * 10
    flat_16 = [{"samples": 16, "correct": 8}] * 20
    after = [{"samples": 16, "correct": 2}] * 20
    known = rises if known_pass_at_16_rises else flat_16
    return {
        "known facts, not trained": pass_at_k_curve(after, 16, known),
        "unseen facts": pass_at_k_curve(after, 16, rises),
    }


def test_guide_says_04_asserts_only_pass_at_16() -> None:
    """04's check cell, run on made-up gains: a fall of pass@1 passes, and so does a rise of
    unseen facts' pass@16; only a rise of known facts' pass@16 fails it."""
    assert "asserts only that known-fact pass@1 rose" not in flat(guide_section("04_training_loop"))
    source = cell("04_training_loop", "pass-at-k-checked")
    sets = dict.fromkeys(("known facts, not trained", "unseen facts"), [])
    quiet = known_and_unseen(known_pass_at_16_rises=False)
    assert all(gain["high"][0] < 0 for gain in quiet.values())  # pass@1 fell on both
    assert quiet["unseen facts"]["low"][-1] > 0 >= quiet["known facts, not trained"]["low"][-1]
    exec(source, {"pass_at_k_sets": sets, "completed": 90, "gains": quiet})
    gains = known_and_unseen(known_pass_at_16_rises=True)
    with pytest.raises(AssertionError):
        exec(source, {"pass_at_k_sets": sets, "completed": 90, "gains": gains})


def measured_gains() -> dict:
    source = cell("04_training_loop", "gains-measured-rendered").split("\n\n\ndef ", 1)[0]
    namespace: dict = {}
    exec(source, namespace)
    return namespace


def states_fraction(text: str, part: int, whole: int) -> bool:
    """Whether `text` gives `part` of `whole` as two numbers a few characters apart."""
    return re.search(rf"(?<![\d.]){part}\D{{1,8}}{whole}(?![\d.])", text) is not None


def test_guide_faq_on_unseen_facts_cites_04s_measured_constants() -> None:
    measured = measured_gains()
    faq = flat(GUIDE.split("## Questions attendees ask", 1)[1].split("\n**", 2)[1])
    assert "memorising)" not in faq and "0.96–0.99" not in faq
    assert measured["MEASURED_ON"] in faq
    cited = re.findall(r"scripts/\w+\.py", faq)
    assert cited and all((ROOT / script).is_file() for script in cited)
    rows = measured["MEASURED_GAINS"]
    for name in ("known facts, not trained", "unseen facts"):
        gains = [gain for _, _, gain, *_ in rows[name]]
        above = sum(low > 0 for *_, low, _, _, _ in rows[name])
        assert f"{min(gains):+.3f}" in faq and f"{max(gains):+.3f}" in faq, name
        assert states_fraction(faq, above, len(gains)), name
        well_formed = np.mean([a / fa - b / fb for b, a, *_, fb, fa in rows[name]])
        assert f"{well_formed:+.3f}" in faq, name
    every = [row for set_rows in rows.values() for row in set_rows]
    assert f"{np.mean([row[5] for row in every]):.1f}" in faq
    assert f"{min(row[6] for row in every):.2f}" in faq
    assert f"{max(row[6] for row in every):.2f}" in faq
    assert f"{measured['BASE_UNSEEN_PASS_AT_16']:.3f}" in faq


def test_guide_run_times_add_up_to_what_step_4_says() -> None:
    """The minutes the set-up steps give for `make run` are the table's seconds, added up."""
    setup, plan = GUIDE.split("## Timed plan", 1)
    plan = plan.split("\n## ", 1)[0]
    seconds = [float(s) for s in re.findall(r"^\|[^|]+\| ([\d.]+) s \|", plan, re.MULTILINE)]
    assert len(seconds) == 9  # the sweep and the eight notebooks
    stated = numbers(setup)
    assert round(sum(seconds) / 60, 1) in stated
    assert round(seconds[0] / 60, 1) in stated  # the sweep
    assert round(seconds[4] / 60, 1) in stated  # the training loop
    assert "2026-12-02" in plan and "load" in plan  # when it was measured, and how busy


def test_guide_03_ranges_come_from_the_named_script_with_grad_norm() -> None:
    section = flat(guide_section("03_one_grpo_step"))
    assert "`optim/grad_norm` about 98" not in section
    cited = re.findall(r"scripts/\w+\.py", section)
    assert cited and all((ROOT / script).is_file() for script in cited)
    if "grad_norm" in section:  # its range is measured by a script the section cites
        assert any("grad_norm" in (ROOT / script).read_text() for script in cited)


# -- 6. Sail's downloads --


def test_snapshot_completer_states_only_what_is_known_of_sails_downloads() -> None:
    assert "when the first request arrives" not in flat(SnapshotCompleter.__doc__)


# -- 7, 8, 9 and 12. notebooks 01 and 03 --


def test_01_says_what_being_wrong_and_bad_format_cost() -> None:
    """The sentence after 01's table gives the three rewards and the two steps between them,
    as `MathEnv.scored` pays them, and no other number."""
    text = cell("01_scoring", "cell-26").split("\n\n", 1)[0]
    assert "A wrong answer (0) costs more than bad formatting" not in text
    right, wrong, badly_formed = reward(1, 1), reward(0, 1), reward(0, 0)
    being_wrong, bad_format = right - wrong, round(wrong - badly_formed, 6)
    assert {being_wrong, bad_format, badly_formed} <= numbers(text)
    assert numbers(text) <= {right, wrong, badly_formed, being_wrong, bad_format}


def test_01_penalty_lives_where_the_exercise_says() -> None:
    """The penalty exercise, in 01 and in the guide, names the `MathEnv` method that holds the
    penalty it says to change, and quotes that method's code as it is."""
    penalty = round(reward(0, 1) - reward(0, 0), 6)
    bullets = [b for b in cell("01_scoring", "cell-30").split("\n- ") if "0.5" in b]
    bullets += [b for b in guide_section("01_scoring").split("\n- ") if "0.5" in b]
    assert len(bullets) == 2
    for bullet in bullets:
        assert penalty in numbers(bullet), bullet
        named = re.findall(r"MathEnv\.(\w+)", bullet)
        assert named, bullet
        for method in named:
            source = " ".join(inspect.getsource(getattr(MathEnv, method)).split())
            assert str(penalty) in source, method
            quoted = [code for code in re.findall(r"`([^`]+)`", bullet) if str(penalty) in code]
            assert all(" ".join(code.split()) in source for code in quoted), quoted


def rendered_03(v1: float, v2: float) -> str:
    namespace = {"mean_positive": 0.04, "mean_negative": -0.02}
    namespace["kl_after"] = {"optim/kl_sample_train_v1": v1, "optim/kl_sample_train_v2": v2}
    source = cell("03_one_grpo_step", "sides-rendered")
    exec(source.rsplit("\nMarkdown(", 1)[0], namespace)
    return flat(
        eval("Markdown(" + source.rsplit("\nMarkdown(", 1)[1], {**namespace, "Markdown": str})
    )


@pytest.mark.parametrize("v1", [-2.3e-5, 3.4e-4])
def test_03_direction_comes_from_v1s_sign_not_from_v2(v1: float) -> None:
    """v1 averages sampler minus learner logprob over the trained tokens: positive, the step
    pushed their logprob down on the whole. The direction the text gives follows v1's sign and
    does not change with v2, above v1 or below it."""
    texts = [rendered_03(v1, v2) for v2 in (abs(v1) / 100, abs(v1) * 100)]
    assert without_numbers(texts[0]) == without_numbers(texts[1])
    assert without_numbers(texts[0]) != without_numbers(rendered_03(-v1, abs(v1) / 100))
    first = re.search(r"\b(up|down)\b", texts[0])
    assert first and first.group(1) == ("down" if v1 > 0 else "up")
    assert "above v2" not in texts[0] and "below v2" not in texts[0]


def test_03_names_the_cookbooks_default_loss_not_tinkers() -> None:
    text = cell("03_one_grpo_step", "3f155921")
    assert "Tinker's default" not in text
    default = inspect.signature(cookbook_train.Config).parameters["loss_fn"].default
    assert default == "importance_sampling" and default in text
    loss_fn = inspect.signature(TrainingClient.forward_backward).parameters["loss_fn"]
    assert loss_fn.default is inspect.Parameter.empty
    packages = Path(inspect.getsourcefile(cookbook_train)).parents[2]
    cited = re.findall(r"tinker_cookbook/[\w/]+\.py", text)
    assert all((packages / path).is_file() for path in cited), cited


# -- 11. one size for the Kimi K2.6 adapter --


@pytest.mark.parametrize("rank", [1, 8, 32, 64])
def test_kimi_adapter_size_is_the_cookbooks(rank: int) -> None:
    assert estimate_kimi_k26(rank).parameters == get_lora_param_count(KIMI_K26, lora_rank=rank)


def test_every_mention_of_the_kimi_adapter_size_is_the_one_figure() -> None:
    kimi = estimate_kimi_k26(32)
    assert ASSUMED_ADAPTER_PARAMETERS == kimi.parameters
    assert kimi.archive_bytes / 1e9 == ASSUMED_ADAPTER_ARCHIVE_GB
    billions, gigabytes = f"{kimi.parameters / 1e9:.1f}", f"{kimi.archive_bytes / 1e9:.1f}"
    for doc in ("instructor.md", "cloud.md"):
        text = flat((ROOT / "docs" / doc).read_text())
        # The docs' other sizes (memory, disk, output, totals) are whole gigabytes.
        assert set(re.findall(r"(\d+\.\d) GB", text)) == {gigabytes}, doc
        assert set(re.findall(r"(\d+\.\d) billion", text)) <= {billions}, doc


@pytest.mark.parametrize("rank", [8, 64])
def test_08_renders_the_kimi_adapter_size_at_its_rank(rank: int) -> None:
    """08's size sentence at another rank: the cookbook's count for that rank, 2 bytes each."""
    source = cell("08_ship_the_adapter", "2b718c68").split("\nif course.backend", 1)[0]
    shown: list = []
    namespace = {"estimate_kimi_k26": estimate_kimi_k26, "rank": rank, "Markdown": Markdown}
    exec(source, {**namespace, "display": shown.append})
    parameters = get_lora_param_count(KIMI_K26, lora_rank=rank)
    (markdown,) = shown
    stated = numbers(markdown.data)
    assert round(parameters / 1e9, 1) in stated and round(2 * parameters / 1e9, 1) in stated
