"""Draw docs/architecture.svg: how the notebooks, Tinker, Sail, the sandbox and the local stack fit.

`python scripts/draw_architecture.py` rewrites the SVG; the README and docs/instructor.md show it.
The picture is drawn with matplotlib rather than by hand so that editing a label is one line here.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("svg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text: a small, greppable SVG
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "architecture.svg"

# name: (x, y, width, height, title, lines of body text, face colour) on a 16 x 10 canvas.
BOXES = {
    "kernel": (
        0.4,
        3.6,
        4.2,
        2.8,
        "Notebook kernel",
        (
            "helpers.connect(backend)",
            "tinker SDK  ·  sail SDK",
            "MathEnv / HarborEnv",
            "reward, advantages",
        ),
        "#eef3fb",
    ),
    "tinker": (
        6.2,
        6.3,
        4.4,
        2.6,
        "Tinker (training)",
        (
            "LoRA adapter + Adam state",
            "forward_backward, optim_step",
            "sampler checkpoints",
            "→ signed URL (tar of PEFT files)",
        ),
        "#fdf0e6",
    ),
    "sail": (
        6.2,
        3.3,
        4.4,
        2.6,
        "Sail (sampling)",
        (
            "SailTokenCompleter",
            "loads the adapter from the URL",
            "tokens + logprobs, stop reason",
            "named LoRAs, files",
        ),
        "#e9f6ec",
    ),
    "sandbox": (
        6.2,
        0.3,
        4.4,
        2.6,
        "Sandbox (notebook 08)",
        (
            "runs model-written scripts",
            "no network, limits on time,",
            "memory, processes, output",
            "tests/test.sh grades",
        ),
        "#f6e9f3",
    ),
    "cloud": (
        11.6,
        5.2,
        4.0,
        3.7,
        'backend = "cloud"',
        (
            "Tinker service: Kimi K2.6",
            "Sail inference fleet",
            "Sailboxes",
            "orca-math from the Hub",
            "keys: TINKER_API_KEY,",
            "SAIL_API_KEY",
        ),
        "#f4f4f4",
    ),
    "local": (
        11.6,
        0.3,
        4.0,
        4.5,
        'backend = "local"',
        (
            "local stack: one process,",
            "one 127.0.0.1 port,",
            "shared by every kernel",
            "(Sail and Tinker routes)",
            "tiny 2-layer model with",
            "Kimi's token ids",
            "+ a bubblewrap sandbox",
            "(make stop, make clean)",
        ),
        "#f4f4f4",
    ),
}
STEP = "One RL step: snapshot (Tinker) → serve (URL) → roll out (Sail, sandbox) → score → train"
FOOTER = "Same notebook code for both backends; only `backend` changes which services answer."
# (from, to, label, label offset)
ARROWS = [
    ("kernel", "tinker", "Datums → train step;\nsave weights", (-0.2, 0.35)),
    ("kernel", "sail", "prompts →\ncompletions", (0.0, 0.3)),
    ("tinker", "sail", "signed URL of\nthe checkpoint", (0.95, 0.0)),
    ("kernel", "sandbox", "commands →\nexit code, output", (-0.2, -0.35)),
]


def centre(name: str) -> tuple[float, float]:
    x, y, w, h, *_ = BOXES[name]
    return x + w / 2, y + h / 2


def edge(name: str, towards: tuple[float, float]) -> tuple[float, float]:
    """The point on box `name`'s border on the way to `towards` (so arrows start at the border)."""
    x, y, w, h, *_ = BOXES[name]
    cx, cy = centre(name)
    dx, dy = towards[0] - cx, towards[1] - cy
    scale = min(w / 2 / abs(dx) if dx else float("inf"), h / 2 / abs(dy) if dy else float("inf"))
    return cx + dx * scale, cy + dy * scale


def draw(out: Path = OUT) -> Path:
    fig, ax = plt.subplots(figsize=(16, 10))
    ax.set_xlim(0, 16)
    ax.set_ylim(-0.6, 9.6)
    ax.axis("off")
    for x, y, w, h, title, body, face in BOXES.values():
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.05", fc=face, ec="#333"))
        ax.text(x + w / 2, y + h - 0.3, title, ha="center", va="top", fontsize=14, weight="bold")
        ax.text(
            x + w / 2,
            y + h - 0.85,
            "\n".join(body),
            ha="center",
            va="top",
            fontsize=11,
            linespacing=1.4,
        )
    for start, end, label, (ox, oy) in ARROWS:
        a, b = edge(start, centre(end)), edge(end, centre(start))
        ax.add_patch(FancyArrowPatch(a, b, arrowstyle="<|-|>", mutation_scale=18, lw=1.6))
        ax.text((a[0] + b[0]) / 2 + ox, (a[1] + b[1]) / 2 + oy, label, ha="center", fontsize=10)
    # Every service in the middle column is answered by one of the two backends on the right.
    ax.plot([11.1, 11.1], [0.3, 8.9], ls="--", color="#555")
    ax.text(11.25, 4.6, "answered by", rotation=90, va="center", fontsize=11, color="#555")
    ax.text(8, 9.35, STEP, ha="center", fontsize=12, style="italic")
    ax.text(8, -0.45, FOOTER, ha="center", fontsize=11)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, bbox_inches="tight", metadata={"Date": None})
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(draw())
