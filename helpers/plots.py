"""The training curves several notebooks draw: notebook 04's, growing as steps finish, and
those atop notebook 05's summary figure. A lesson's own figure is in its `# @save` cells.

Per-step numbers are noisy (each step sees other problems), so every curve is drawn twice:
the raw value of each step as a faint dot, and its moving average as a line.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import display
from matplotlib.axes import Axes

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
        draw_training_panels(self.axes, records)
        self.fig.tight_layout()
        self.handle.update(self.fig)


def draw_series(ax: Axes, records: list[dict], key: str, label: str, color: str) -> None:
    """Faint dots for each step's value, a line for its moving average."""
    points = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    if not points:
        return
    steps, values = zip(*points, strict=True)
    ax.plot(steps, values, "o", color=color, alpha=0.25, markersize=3)
    ax.plot(steps, moving_average(list(values)), color=color, linewidth=2, label=label)


def draw_training_panels(axes: list[Axes], records: list[dict]) -> None:
    colors = iter(plt.rcParams["axes.prop_cycle"].by_key()["color"])
    for ax, (title, ylim, series) in zip(axes, TRAINING_PANELS, strict=True):
        ax.clear()
        for key, label in series:
            draw_series(ax, records, key, label, next(colors))
        ax.set(title=title, xlabel="step", ylim=ylim)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(loc="lower right", fontsize=8, title=f"{SMOOTHING_STEPS}-step average")
