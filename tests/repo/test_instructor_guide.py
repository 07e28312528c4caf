"""docs/instructor.md covers every notebook and every "Try this", and the numbers it states
are the ones the code, the notebooks' measured constants and its own timed plan give."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from helpers.errors import CourseConfigError
from helpers.measurements import load_measurement
from helpers.notebook_parameters import resolve
from helpers.scoring import MathEnv, final_answer
from kimi import offline_kimi_tokenizer
from local_stack.http import ApiError
from local_stack.sail.lora_config import INVALID_RANK, check_lora_config
from tests.notebook_source import (
    NOTEBOOK_NAMES,
    ROOT,
    flat,
    guide,
    guide_section,
    markdown,
    numbers,
)

END = "<|im_end|>"


def _normalise(text: str) -> str:
    """Lower-case words without markup or edge punctuation; notebook numbers left out (they
    change when the notebooks are renumbered)."""
    text = re.sub(r"notebook \d\d", "notebook NN", text.replace("`", "").replace("*", ""))
    return " ".join(word.strip(",:;.()") for word in text.lower().split())


def try_this_keys(name: str) -> list[str]:
    """The first four words of each "Try this" bullet: how the guide names each exercise."""
    text = markdown(name)
    assert "## Try this" in text, f"{name} has no 'Try this' section"
    bullets = [
        line[2:] for line in text.split("## Try this", 1)[1].splitlines() if line.startswith("- ")
    ]
    assert bullets, f"{name}'s 'Try this' has no bullets"
    return [" ".join(_normalise(bullet).split()[:4]) for bullet in bullets]


def test_the_course_has_its_ten_notebooks() -> None:
    """Ten notebooks: the loop (04) apart from whether it learned (05), and the optional
    grader-hole test last (10)."""
    assert len(NOTEBOOK_NAMES) == 10, NOTEBOOK_NAMES


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_every_notebook_has_a_section(name: str) -> None:
    assert guide_section(name)


def test_every_notebook_the_guide_names_exists() -> None:
    named = set(re.findall(r"\b(\d\d_[a-z_]+[a-z])\b", guide()))
    assert named, "the guide names no notebook"
    assert named <= set(NOTEBOOK_NAMES), f"the guide names {named - set(NOTEBOOK_NAMES)}"


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_guide_solves_every_try_this(name: str) -> None:
    section = _normalise(guide_section(name))
    assert "try this solutions" in section
    missing = [key for key in try_this_keys(name) if key not in section]
    assert not missing, f"docs/instructor.md's {name} has no solution starting with {missing}"


def test_diagram_exists_and_the_readme_and_guide_show_it() -> None:
    diagram = ROOT / "docs" / "architecture.svg"
    svg = diagram.read_text()
    assert svg.lstrip().startswith(("<?xml", "<svg")) and "</svg>" in svg
    for label in ("Tinker", "Sail", "Sandbox", "local stack"):
        assert label in svg, f"the diagram has no label {label!r}"
    assert re.search(r"!\[[^\]]*\]\(docs/architecture\.svg\)", (ROOT / "README.md").read_text())
    assert re.search(r"!\[[^\]]*\]\(architecture\.svg\)", guide())


def test_every_make_target_the_guide_names_exists() -> None:
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    named = set(re.findall(r"`make ([a-z-]+)", guide()))
    assert named and named <= targets, f"the guide names missing targets {named - targets}"


# The guide's solutions for notebook 01 state rewards; these are cheap to check exactly.
def reward(renderer, question: str, reference: str, completion: str) -> float:
    env = MathEnv(question, reference, renderer)
    return asyncio.run(env.step(offline_kimi_tokenizer().encode(completion))).reward


@pytest.mark.parametrize(
    ("reference", "completion", "expected"),
    [
        ("3 - 5 = -2.", rf"</think>\boxed{{-2}}{END}", 1.0),  # the minus sign is kept
        ("7 + 12 = 19.", rf"</think>\boxed{{19.0}}{END}", 1.0),  # 19.0 normalises to 19
        ("7 + 12 = 19.", rf"</think>\boxed{{nineteen}}{END}", 0.0),  # well formed, not equal
    ],
)
def test_scoring_solutions(renderer, reference: str, completion: str, expected: float) -> None:
    assert reward(renderer, "q", reference, completion) == pytest.approx(expected)
    assert f"**{expected:g}**" in guide_section("01_scoring")


def test_the_guides_fooling_reference_fools_final_answer() -> None:
    section = flat(guide_section("01_scoring"))
    reference = "He has 12 apples, 2 more than Sam."
    assert reference in section  # the example the guide gives, quoted as input
    stated = re.search(r"`final_answer` gives (-?\d+)", section)
    assert stated and final_answer(reference) == stated.group(1) != "12"


def test_a_lora_name_with_capitals_stops_in_one_sentence() -> None:
    with pytest.raises(CourseConfigError, match=r"a-z, 0-9 and '-'") as refused:
        resolve(
            "09_ship_the_adapter",
            "local",
            run_name="arithmetic",
            short_run_steps=12,
            lora_name="Course_Adapter",
            parity_problems=4,
            eval_problems=None,
            eval_samples=None,
            max_tokens=None,
            seed=0,
            keep_on_sail=False,
            budget_sampled_tokens=1_000_000,
        )
    assert str(refused.value).count(". ") == 0


def test_a_rank_64_config_fails_as_the_guide_says() -> None:
    config = json.loads((ROOT / "tinker_adapter_config.json").read_text())
    with pytest.raises(ApiError) as refused:
        check_lora_config({**config, "r": 64})
    section = flat(guide_section("09_ship_the_adapter"))
    assert refused.value.code == INVALID_RANK and f"`{INVALID_RANK}`" in section
    assert "has rank [64]; ranks must be integers from 1 to 32" in str(refused.value)


def test_eight_tokens_stop_on_length_and_pay_the_format_penalty(local_stack, renderer) -> None:
    """Notebook 02's "Set max_tokens to 8", as the guide solves it, on the local stack."""
    import tinker

    from helpers.serving import sail_policy

    async def sample() -> list[tuple[str, float]]:
        service = tinker.ServiceClient()
        config = json.loads((ROOT / "tinker_adapter_config.json").read_text())
        training = await service.create_lora_training_client_async(
            base_model=config["base_model_name_or_path"], rank=config["r"]
        )
        policy = await sail_policy(
            training,
            service,
            config,
            "guide-eight-tokens",
            model_name=config["base_model_name_or_path"],
            max_tokens=8,
            temperature=1.0,
        )
        env = MathEnv("What is 16 minus 2?", "16 - 2 = 14.", renderer)
        prompt, stop = await env.initial_observation()
        results = []
        for _ in range(4):
            sampled = await policy(prompt, stop)
            reward = await MathEnv("What is 16 minus 2?", "14", renderer).step(sampled.tokens)
            results.append((len(sampled.tokens), reward.reward))
        return results

    results = asyncio.run(sample())
    # Cut off at max_tokens, but for a rare early <|im_end|>: which one depends on the stack's
    # shared sampling generator, and so on the tests that sampled before this one.
    assert all(length <= 8 for length, _ in results) and 8 in dict(results), results
    # A cut-off completion has no answer to grade (notebook 01): each one earns -0.1.
    assert all(reward == pytest.approx(-0.1) for _, reward in results), results
    bold = re.findall(r"\*\*([^*]+)\*\*", guide_section("02_snapshot_and_serve"))
    assert -0.1 in numbers(" ".join(bold))  # the reward the guide's solution gives


def states_fraction(text: str, part: int, whole: int) -> bool:
    """Whether `text` gives `part` of `whole` as two numbers a few characters apart."""
    return re.search(rf"(?<![\d.]){part}\D{{1,8}}{whole}(?![\d.])", text) is not None


def test_the_faq_on_unseen_facts_cites_the_stored_measurement() -> None:
    """The FAQ quotes measurements/held_out_gains.json, which notebook 04 renders too."""
    measured = load_measurement("held_out_gains")
    faq = flat(guide().split("## Questions attendees ask", 1)[1].split("\n**", 2)[1]).replace(
        "−", "-"
    )
    assert measured["date"] in faq and measured["script"] in faq
    by_seed = measured["by_seed"].values()
    for name in ("known facts, not trained", "unseen facts"):
        gains = [seed[name]["correct"]["gain"] for seed in by_seed]
        above = sum(seed[name]["correct"]["gain_interval"][0] > 0 for seed in by_seed)
        assert f"{min(gains):+.3f}" in faq and f"{max(gains):+.3f}" in faq, name
        assert states_fraction(faq, above, len(gains)), name


def test_the_run_times_add_up_to_what_the_set_up_steps_say() -> None:
    """The minutes the set-up steps give for `make run` are the table's seconds, added up, and
    the table says when it was measured."""
    setup, plan = guide().split("## Timed plan", 1)
    plan = plan.split("\n## ", 1)[0]
    seconds = [float(s) for s in re.findall(r"^\|[^|]+\| ([\d.]+) s \|", plan, re.MULTILINE)]
    assert len(seconds) == 10  # the sweep and the nine notebooks of `make run`
    stated = numbers(setup)
    assert round(sum(seconds) / 60, 1) in stated
    assert round(seconds[0] / 60, 1) in stated  # the sweep
    assert round(seconds[4] / 60, 1) in stated  # the training loop
    assert re.search(r"20\d\d-\d\d-\d\d", plan)


def test_the_03_ranges_come_from_a_script_it_cites() -> None:
    section = flat(guide_section("03_one_grpo_step"))
    cited = re.findall(r"scripts/\w+\.py", section)
    assert cited and all((ROOT / script).is_file() for script in cited)
    if "grad_norm" in section:  # its range is measured by a script the section cites
        assert any("grad_norm" in (ROOT / script).read_text() for script in cited)
