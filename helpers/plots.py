"""Figures for the training loop: a reward curve that grows as steps finish, and a summary."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from IPython.display import display
from matplotlib.figure import Figure

TRAIN_SERIES = [("reward", "mean reward"), ("correct", "correct rate"), ("format", "format rate")]
EVAL_KEYS = [
    ("reward", "mean reward"),
    ("correct", "correct"),
    ("format", "format"),
    ("correct_given_format", "correct, of\nwell-formed"),
]


class LiveRewardPlot:
    """One figure, redrawn in place after every step."""

    def __init__(self) -> None:
        self.fig, self.ax = plt.subplots(figsize=(6, 3))
        plt.close(self.fig)  # shown through the display handle only, never twice
        self.handle = display(self.fig, display_id=True)

    def update(self, records: list[dict]) -> None:
        self.ax.clear()
        _draw_training_curves(self.ax, records)
        self.handle.update(self.fig)


def _draw_training_curves(ax, records: list[dict]) -> None:
    steps = [r["step"] for r in records]
    for key, label in TRAIN_SERIES:
        ax.plot(steps, [r[key] for r in records], marker="o", markersize=3, label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("mean reward / rate")
    ax.set_ylim(-0.15, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("Training rollouts, per step")


def summary_figure(records: list[dict], before: dict, after: dict, path: Path) -> Figure:
    """Training curves (left) and held-out scores before vs after training (right), saved as PNG."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), width_ratios=[3, 2.4])
    _draw_training_curves(left, records)
    width = 0.38
    xs = range(len(EVAL_KEYS))
    for offset, scores, label in [(-width / 2, before, "before"), (width / 2, after, "after")]:
        values = [scores[key] for key, _ in EVAL_KEYS]
        bars = right.bar([x + offset for x in xs], values, width, label=f"{label} training")
        right.bar_label(bars, fmt="%.2f", fontsize=8)
    right.set_xticks(list(xs), [label for _, label in EVAL_KEYS])
    right.set_ylim(min(0.0, before["reward"], after["reward"]) - 0.05, 1.1)
    right.axhline(0, color="black", linewidth=0.6)
    gain = after["reward"] - before["reward"]
    right.set_title(f"Held-out: {after['samples']} samples each, reward {gain:+.3f}")
    right.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return fig
