"""Figures for the training loops: a reward curve that grows as steps finish, a summary, and
a timeline of when sampling and training ran."""

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


# Colours of a timeline's bars, by what ran.
SPAN_COLOURS = {"snapshot": "tab:gray", "train": "tab:orange", "sample": "tab:blue"}


def timeline_figure(runs: dict[str, tuple[list[tuple[str, int, float, float]], int]]) -> Figure:
    """One panel per run: when Tinker snapshotted and trained (top row) and when each batch
    was being sampled on Sail (one row per lane: batch `step` in lane `step % lanes`).

    `runs` maps a run's name to its spans, `(what, step, start, end)` in seconds since the
    run began, and its number of sampling lanes.
    """
    heights = [1 + lanes for _, lanes in runs.values()]
    fig, axes = plt.subplots(
        len(runs), 1, figsize=(11, 0.8 + 0.45 * sum(heights)), height_ratios=heights
    )
    axes = [axes] if len(runs) == 1 else list(axes)
    end = max(span[3] for spans, _ in runs.values() for span in spans)
    for ax, (name, (spans, lanes)) in zip(axes, runs.items(), strict=True):
        for what, step, start, stop in spans:
            row = 0 if what != "sample" else 1 + step % lanes
            ax.barh(row, stop - start, left=start, height=0.7, color=SPAN_COLOURS[what])
            if what != "snapshot":
                ax.text((start + stop) / 2, row, str(step), ha="center", va="center", fontsize=8)
        rows = ["Tinker"] + [f"Sail lane {lane + 1}" for lane in range(lanes)]
        ax.set_yticks(range(len(rows)), rows)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_xlim(0, end * 1.01)
        ax.set_title(name, loc="left", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[-1].set_xlabel("seconds since the run started (bar labels: the step a batch is for)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in SPAN_COLOURS.values()]
    fig.legend(handles, ["snapshot", "train", "sample"], loc="upper right", ncol=3, fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    plt.close(fig)
    return fig
