"""Figures that several notebooks draw: training curves that grow as steps finish, and a
summary of a run with its held-out scores. A lesson's own figure is in its `# @save` cells.

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
# Behind each bar's label, so that it stays readable where an interval's line crosses it.
LABEL_BOX = {"facecolor": "white", "alpha": 0.8, "pad": 1, "edgecolor": "none"}


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
    weight = "optim/importance_weight_"  # each step's record holds its _max and _min
    deviations = [
        {"step": r["step"], "deviation": max(r[weight + "max"] - 1, 1 - r[weight + "min"])}
        for r in records
        if r.get(weight + "max") is not None
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
        errors = [values - low, high - values]
        bars = ax.bar(xs + offset, values, width, yerr=errors, capsize=3, label=f"{when} training")
        ax.bar_label(bars, fmt="%.2f", fontsize=8, label_type="center", bbox=LABEL_BOX)
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
