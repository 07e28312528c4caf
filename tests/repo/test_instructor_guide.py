"""docs/instructor.md covers every notebook and every "Try this", and its checkable claims hold."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from helpers.errors import CourseConfigError
from helpers.params import check_params
from helpers.scoring import MathEnv, final_answer
from kimi import offline_kimi_tokenizer
from local_stack.http import ApiError
from local_stack.sail.lora_config import INVALID_RANK, check_lora_config

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "instructor.md"
NOTEBOOKS = ROOT / "notebooks"
NOTEBOOK_NAMES = sorted(path.stem for path in NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
END = "<|im_end|>"


def guide_section(name: str) -> str:
    """The text under the guide's `### <name>` heading, up to the next heading."""
    text = GUIDE.read_text()
    match = re.search(rf"^### {name}\b.*?(?=^##)", text, flags=re.S | re.M)
    assert match, f"docs/instructor.md has no section '### {name}'"
    return match.group(0)


def _normalise(text: str) -> str:
    """Lower-case words without markup or edge punctuation; notebook numbers left out (they
    change when the notebooks are renumbered)."""
    text = re.sub(r"notebook \d\d", "notebook NN", text.replace("`", "").replace("*", ""))
    return " ".join(word.strip(",:;.()") for word in text.lower().split())


def try_this_keys(notebook: Path) -> list[str]:
    """The first four words of each "Try this" bullet: how the guide names each exercise."""
    cells = json.loads(notebook.read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "## Try this" in text, f"{notebook.name} has no 'Try this' section"
    bullets = [
        line[2:] for line in text.split("## Try this", 1)[1].splitlines() if line.startswith("- ")
    ]
    assert bullets, f"{notebook.name}'s 'Try this' has no bullets"
    return [" ".join(_normalise(bullet).split()[:4]) for bullet in bullets]


def test_the_course_has_its_eight_notebooks() -> None:
    assert len(NOTEBOOK_NAMES) == 8, NOTEBOOK_NAMES


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_every_notebook_has_a_finished_section(name: str) -> None:
    section = guide_section(name)
    assert "being written" not in section, f"{name} exists; its section still says otherwise"


def test_every_notebook_the_guide_names_exists() -> None:
    named = set(re.findall(r"\b(0\d_[a-z_]+[a-z])\b", GUIDE.read_text()))
    assert named, "the guide names no notebook"
    assert named <= set(NOTEBOOK_NAMES), f"the guide names {named - set(NOTEBOOK_NAMES)}"


@pytest.mark.parametrize("name", NOTEBOOK_NAMES)
def test_guide_solves_every_try_this(name: str) -> None:
    section = _normalise(guide_section(name))
    assert "try this solutions" in section
    missing = [key for key in try_this_keys(NOTEBOOKS / f"{name}.ipynb") if key not in section]
    assert not missing, f"docs/instructor.md's {name} has no solution starting with {missing}"


def test_diagram_exists_and_the_readme_and_guide_show_it() -> None:
    diagram = ROOT / "docs" / "architecture.svg"
    svg = diagram.read_text()
    assert svg.lstrip().startswith(("<?xml", "<svg")) and "</svg>" in svg
    for label in ("Tinker", "Sail", "Sandbox", "local stack"):
        assert label in svg, f"the diagram has no label {label!r}"
    assert re.search(r"!\[[^\]]*\]\(docs/architecture\.svg\)", (ROOT / "README.md").read_text())
    assert re.search(r"!\[[^\]]*\]\(architecture\.svg\)", GUIDE.read_text())


def test_every_make_target_the_guide_names_exists() -> None:
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.M))
    named = set(re.findall(r"`make ([a-z-]+)", GUIDE.read_text()))
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
    section = " ".join(guide_section("01_scoring").split())
    reference = "He has 12 apples, 2 more than Sam."
    assert reference in section and "(`final_answer` gives 2)" in section
    assert final_answer(reference) == "2"


def test_a_lora_name_with_capitals_stops_in_one_sentence() -> None:
    with pytest.raises(CourseConfigError, match=r"a-z, 0-9 and '-'") as refused:
        check_params(
            "08_ship_the_adapter",
            backend="local",
            run_name="arithmetic",
            short_run_steps=12,
            lora_name="Course_Adapter",
            parity_problems=4,
            table_problems=8,
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
    section = " ".join(guide_section("08_ship_the_adapter").split())
    assert refused.value.code == INVALID_RANK and f"`{INVALID_RANK}`" in section
    assert "has rank [64]; ranks must be integers from 1 to 32" in str(refused.value)
    assert "rank [64] and ranks must be integers from 1 to 32" in section


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
    assert all(length == 8 for length, _ in results), results  # every sample hit max_tokens
    # A cut-off completion has no answer to grade (notebook 01): each one earns -0.1.
    assert all(reward == pytest.approx(-0.1) for _, reward in results), results
    assert "all get **−0.1**" in " ".join(guide_section("02_snapshot_and_serve").split())
