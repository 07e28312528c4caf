"""Figures for the training loops: curves that grow as steps finish, a summary, and a
timeline of when sampling and training ran.

Per-step numbers are noisy (each step sees other problems), so every curve is drawn twice:
the raw value of each step as a faint dot, and its moving average as a line.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display
from matplotlib.axes import Axes
from matplotlib.figure import Figure

SMOOTHING_STEPS = 10
# (panel title, y-limits, [(metrics.jsonl key, label)]): the reward gets a panel of its own,
# so it does not hide under the correct rate it nearly equals.
TRAINING_PANELS = (
    ("Training rollouts: mean reward", (-0.15, 1.05), (("reward", "mean reward"),)),
    (
        "Training rollouts: correct and format rates",
        (0.0, 1.05),
        (("correct", "correct rate"), ("format", "format rate")),
    ),
)
SCORES = (
    ("reward", "mean reward"),
    ("correct", "correct"),
    ("format", "format"),
    ("correct_given_format", "correct, of\nwell-formed"),
)


def moving_average(values: list[float], window: int = SMOOTHING_STEPS) -> list[float]:
    """The mean of each value and the (up to) `window - 1` values before it."""
    return [float(np.mean(values[max(0, i - window + 1) : i + 1])) for i in range(len(values))]


class LiveTrainingPlot:
    """The training curves in one figure, redrawn in place after every step."""

    def __init__(self) -> None:
        self.fig, self.axes = plt.subplots(1, len(TRAINING_PANELS), figsize=(11, 3.2))
        plt.close(self.fig)  # shown through the display handle only, never twice
        self.handle = display(self.fig, display_id=True)

    def update(self, records: list[dict]) -> None:
        _draw_training_panels(self.axes, records)
        self.fig.tight_layout()
        self.handle.update(self.fig)


def _draw_series(ax: Axes, records: list[dict], key: str, label: str, color: str) -> None:
    """Faint dots for each step's value, a line for its moving average."""
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if not points:
        return
    steps, values = zip(*points, strict=True)
    ax.plot(steps, values, "o", color=color, alpha=0.25, markersize=3)
    ax.plot(steps, moving_average(list(values)), color=color, linewidth=2, label=label)


def _draw_training_panels(axes: list[Axes], records: list[dict]) -> None:
    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    for ax, (title, ylim, series) in zip(axes, TRAINING_PANELS, strict=True):
        ax.clear()
        for key, label in series:
            _draw_series(ax, records, key, label, next(colors))
        ax.set(title=title, xlabel="step", ylim=ylim)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="lower right", fontsize=8, title=f"{SMOOTHING_STEPS}-step average")


def _draw_importance_weights(ax: Axes, records: list[dict]) -> None:
    """How far each step's importance weights strayed from 1, on a log scale."""
    deviations = [
        {
            "step": r["step"],
            "deviation": max(
                r["optim/importance_weight_max"] - 1, 1 - r["optim/importance_weight_min"]
            ),
        }
        for r in records
        if r.get("optim/importance_weight_max") is not None
    ]
    _draw_series(ax, deviations, "deviation", "largest |weight - 1|", "tab:purple")
    if ax.lines and max(d["deviation"] for d in deviations) > 0:
        ax.set_yscale("log")
    ax.set(title="Importance weights, per step", xlabel="step")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(loc="upper right", fontsize=8, title=f"{SMOOTHING_STEPS}-step average")


def _draw_held_out(ax: Axes, name: str, comparison: dict, samples: int) -> None:
    """Bars before and after training, each with its 95% interval."""
    xs = np.arange(len(SCORES))
    width = 0.38
    for offset, when in ((-width / 2, "before"), (width / 2, "after")):
        values = np.array([comparison[key][when] for key, _ in SCORES])
        low, high = np.array([comparison[key][f"{when}_interval"] for key, _ in SCORES]).T
        bars = ax.bar(
            xs + offset,
            values,
            width,
            yerr=[values - low, high - values],
            capsize=3,
            label=f"{when} training",
        )
        labels = ax.bar_label(bars, fmt="%.2f", fontsize=8, label_type="center")
        for label in labels:  # readable where an interval's line crosses it
            label.set_bbox({"facecolor": "white", "alpha": 0.8, "pad": 1, "edgecolor": "none"})
    ax.set_xticks(xs, [label for _, label in SCORES])
    ax.set_ylim(min(0.0, *(comparison[k]["before_interval"][0] for k, _ in SCORES)) - 0.05, 1.1)
    ax.axhline(0, color="black", linewidth=0.6)
    gain = comparison["correct_given_format"]
    low, high = gain["gain_interval"]
    ax.set_title(
        f"Held-out, {name} ({samples} samples)\n"
        f"correct of well-formed: {gain['gain']:+.3f} [{low:+.3f}, {high:+.3f}]",
        fontsize=10,
    )
    ax.legend(loc="upper left", fontsize=8)


def summary_figure(
    records: list[dict], comparisons: dict[str, dict], samples: dict[str, int], path: Path
) -> Figure:
    """Training curves and importance weights (top), held-out scores with 95% intervals
    (bottom, one panel per held-out set); saved as PNG at `path` and returned."""
    fig = plt.figure(figsize=(14, 8))
    grid = fig.add_gridspec(2, 6)
    top = [fig.add_subplot(grid[0, 2 * i : 2 * i + 2]) for i in range(3)]
    _draw_training_panels(top[:2], records)
    _draw_importance_weights(top[2], records)
    width = 6 // max(len(comparisons), 2)  # up to three held-out sets side by side
    for i, (name, comparison) in enumerate(comparisons.items()):
        ax = fig.add_subplot(grid[1, width * i : width * (i + 1)])
        _draw_held_out(ax, name, comparison, samples[name])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return fig


def pass_at_k_figure(curves: dict[str, dict[str, dict]]) -> Figure:
    """pass@k against k, one panel per held-out set, base and trained weights each with its
    95% interval as a band. `curves[set][when]` is `helpers.training.pass_at_k_curve`'s result."""
    fig, axes = plt.subplots(1, len(curves), figsize=(5.5 * len(curves), 3.8), squeeze=False)
    for ax, (name, by_when) in zip(axes[0], curves.items(), strict=True):
        for when, curve in by_when.items():
            (line,) = ax.plot(curve["k"], curve["value"], marker="o", markersize=3, label=when)
            ax.fill_between(
                curve["k"], curve["low"], curve["high"], alpha=0.2, color=line.get_color()
            )
        ax.set_xscale("log", base=2)
        ticks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= curve["k"][-1]]
        ax.set_xticks(ticks, [str(k) for k in ticks])
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("k (answers sampled per problem)")
        ax.set_ylabel("pass@k")
        ax.set_title(f"Held-out, {name}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
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
