"""Compare runs fairly: held-out gains with 95% intervals, the settings that differ, and how
far apart runs land that differ only in their seed. Notebook 06 teaches with these.

An interval here treats the held-out *problems* as the unit, not the samples: the samples of
one problem share its difficulty, so they are not independent draws. Each score is a ratio
of sums over problems (reward = total reward / samples, correct among well-formed = correct
and well-formed / well-formed), and its standard error comes from each problem's residual
around that ratio (the usual linearisation of a ratio estimator). A gain compares the same
problems before and after training, so its interval pairs them problem by problem.
Runs whose state.json stores no counts per problem get no interval. Every interval uses
Student's t quantile for its degrees of freedom (problems - 1, or the pooled seeds' degrees
of freedom), not 1.96: with a handful of seeds the normal quantile is far too narrow
(t with 2 degrees of freedom is 4.30).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from sweeps.runs import Run

CONFIDENCE = 0.95  # every interval here is a two-sided 95% interval
POWER = 0.8  # the seed rule: the chance of telling apart two settings that truly differ
# Each held-out score as a ratio of two counts notebook 05 stores per problem.
RATIOS = {
    "reward": ("reward", "samples"),
    "correct": ("correct", "samples"),
    "format": ("format", "samples"),
    "correct_given_format": ("correct_and_format", "format"),
}


def residuals(problems: list[dict], metric: str) -> np.ndarray | None:
    """Each problem's contribution to the score's error, or None if the ratio is undefined."""
    top, bottom = RATIOS[metric]
    numerator = np.array([p[top] for p in problems], dtype=float)
    denominator = np.array([p[bottom] for p in problems], dtype=float)
    if len(problems) < 2 or denominator.sum() == 0:
        return None
    ratio = numerator.sum() / denominator.sum()
    return (numerator - ratio * denominator) / denominator.mean()


def problem_scores(scores: dict, metric: str) -> np.ndarray | None:
    """One value per held-out problem whose mean is `scores[metric]` and whose spread is
    that score's error (the score plus each problem's residual: for a score whose problems
    have the same number of samples, each problem's own mean), or None without counts."""
    problems = scores.get("problems")
    errors = residuals(problems, metric) if problems else None
    if problems is None or errors is None:
        return None
    top, bottom = RATIOS[metric]
    return sum(p[top] for p in problems) / sum(p[bottom] for p in problems) + errors


def t_quantile(probability: float, freedom: float) -> float:
    """Student's t quantile with `freedom` degrees of freedom (scipy is not a dependency): the
    density integrated by Simpson's rule, the quantile found by bisection."""
    if not 0.5 <= probability < 1 or freedom <= 0:
        raise ValueError("probability must be from 0.5 to 1 (excluded), freedom above 0")
    scale = math.exp(math.lgamma((freedom + 1) / 2) - math.lgamma(freedom / 2)) / math.sqrt(
        freedom * math.pi
    )

    def tail_mass(x: float) -> float:  # P(0 < T < x)
        points = np.linspace(0.0, x, 2001)
        density = scale * (1 + points**2 / freedom) ** (-(freedom + 1) / 2)
        weights = np.ones(len(points))
        weights[1:-1:2], weights[2:-1:2] = 4, 2
        return float(density @ weights) * (x / 2000) / 3

    low, high = 0.0, 1.0
    while tail_mass(high) < probability - 0.5:
        low, high = high, 2 * high
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if tail_mass(middle) < probability - 0.5 else (low, middle)
    return (low + high) / 2


def interval_quantile(freedom: float) -> float:
    """How many standard errors either side of an estimate its 95% interval reaches."""
    return t_quantile(0.5 + CONFIDENCE / 2, freedom)


def half_width(errors: np.ndarray | None) -> float:
    """Half the 95% interval of a mean whose per-problem errors are `errors` (NaN if None)."""
    if errors is None:
        return math.nan
    spread = float(np.std(errors, ddof=1)) / math.sqrt(len(errors))
    return interval_quantile(len(errors) - 1) * spread


def score_half_width(scores: dict, metric: str) -> float:
    """± this much around `scores[metric]` is its 95% interval (NaN without per-problem counts)."""
    problems = scores.get("problems")
    return half_width(residuals(problems, metric) if problems else None)


def gain_half_width(before: dict, after: dict, metric: str) -> float:
    """± this much around after - before is the gain's 95% interval, pairing each problem's
    before and after (NaN without counts for the same problems on both sides)."""
    first, second = before.get("problems"), after.get("problems")
    if not first or not second or len(first) != len(second):
        return math.nan
    errors = residuals(first, metric), residuals(second, metric)
    return half_width(None if errors[0] is None or errors[1] is None else errors[1] - errors[0])


def differing_settings(runs: list[Run]) -> list[str]:
    """The settings whose values are not the same in every run, in the order runs list them."""
    names = list(dict.fromkeys(name for run in runs for name in run.settings))
    return [n for n in names if len({repr(run.settings.get(n)) for run in runs}) > 1]


def held_out_sets(runs: list[Run]) -> list[str]:
    return list(dict.fromkeys(name for run in runs for name in run.before()))


def comparison_table(runs: list[Run], metric: str = "reward") -> pd.DataFrame:
    """One row per run, largest held-out gain first (on the first held-out set; runs
    without a gain last): the settings that differ, steps done, and for each held-out set
    `metric` before and after training, the gain and its 95% half-width."""
    differ, sets = differing_settings(runs), held_out_sets(runs)
    rows = []
    for run in runs:
        row: dict[str, Any] = {"run": run.name, **{n: run.settings.get(n) for n in differ}}
        row["steps"] = run.completed_steps
        before, after = run.before(), run.after() or {}
        for name in sets:
            b, a = before.get(name, {}), after.get(name, {})
            row[f"{name} before"] = b.get(metric, math.nan)
            row[f"{name} after"] = a.get(metric, math.nan)
            row[f"{name} gain"] = row[f"{name} after"] - row[f"{name} before"]
            row[f"{name} ±"] = gain_half_width(b, a, metric) if a and b else math.nan
        row["note"] = run.missing_after() or ""
        rows.append(row)
    table = pd.DataFrame(rows).set_index("run")
    if not sets:
        return table
    return table.sort_values(f"{sets[0]} gain", ascending=False, na_position="last", kind="stable")


def by_setting(table: pd.DataFrame, column: str, settings: list[str]) -> dict[str, pd.Series]:
    """The measured values of `column`, one per seed, grouped by every setting in `settings`
    except the seed, each group labelled like "learning_rate=0.001" ("" if only seeds
    differ). Runs that share their seed too are repeats of one seed, not more seeds: their
    values are averaged into one (with no `seed` in `settings`, every run of a group has
    the same seed)."""
    others = [name for name in settings if name != "seed"]
    measured = table.dropna(subset=[column])
    groups: dict[str, dict[str, list[float]]] = {}
    for run, value in measured[column].items():
        label = ", ".join(f"{name}={measured.at[run, name]}" for name in others)
        seed = repr(measured.at[run, "seed"]) if "seed" in settings else "the same seed"
        groups.setdefault(label, {}).setdefault(seed, []).append(float(value))
    return {
        label: pd.Series({seed: sum(v) / len(v) for seed, v in seeds.items()}, dtype=float)
        for label, seeds in groups.items()
    }


def seed_spread(table: pd.DataFrame, column: str, settings: list[str]) -> tuple[float, int]:
    """The standard deviation of `column` between runs whose `settings` differ only in
    `seed`, pooled over the settings' groups, and its degrees of freedom; (NaN, 0) if no two
    runs share their settings."""
    groups = by_setting(table, column, settings).values()
    squares = sum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    freedom = sum(len(g) - 1 for g in groups)
    return (math.sqrt(squares / freedom), freedom) if freedom else (math.nan, 0)


def seeds_needed(spread: float, difference: float, power: float = POWER) -> int:
    """Seeds per setting for a two-sided 95% comparison of two settings' mean gains to detect
    a true `difference` with probability `power`, when seeds spread by `spread`: the least
    n >= 2 with (t_0.975 + t_power) x spread x sqrt(2/n) <= difference, the t quantiles
    taken at the pooled 2(n - 1) degrees of freedom."""
    for n in range(2, 100_001):
        freedom = 2 * (n - 1)
        reach = (interval_quantile(freedom) + t_quantile(power, freedom)) * spread
        if reach * math.sqrt(2 / n) <= difference:
            return n
    raise ValueError(f"more than 100000 seeds: a difference of {difference} is lost in the noise")


def shown_table(table: pd.DataFrame, settings: list[str], sets: list[str]) -> pd.DataFrame:
    """`comparison_table` as notebook 06 shows it: the settings that differ, the steps, and
    per held-out set "before -> after" and "gain ± half-width" (? for a score not measured)."""
    shown = table[[*settings, "steps"]].copy()
    for name in sets:
        shown[f"{name}: before -> after"] = [
            f"{b:.3f} -> " + ("?" if math.isnan(a) else f"{a:.3f}")
            for b, a in zip(table[f"{name} before"], table[f"{name} after"], strict=True)
        ]
        shown[f"{name}: gain"] = [
            "" if math.isnan(g) else f"{g:+.3f}" + ("" if math.isnan(h) else f" ± {h:.3f}")
            for g, h in zip(table[f"{name} gain"], table[f"{name} ±"], strict=True)
        ]
    shown["note"] = table["note"]
    return shown


def beyond_zero(table: pd.DataFrame, sets: list[str], metric: str) -> str:
    """One sentence: per held-out set, how many runs' gains have a 95% interval that excludes
    0, and on which side."""
    parts = []
    for name in sets:
        gain, half = table[f"{name} gain"], table[f"{name} ±"]
        measured = int((gain.notna() & half.notna()).sum())
        above, below = int((gain - half > 0).sum()), int((gain + half < 0).sum())
        sides = ", ".join(
            f"{count} {side}" for count, side in ((above, "above"), (below, "below")) if count
        )
        parts.append(f"{name}: {above + below} of {measured}" + (f" ({sides})" if sides else ""))
    return f"runs whose {metric} gain has a 95% interval excluding 0, " + "; ".join(parts)


def standard_error_of_one_run(table: pd.DataFrame, runs: list[Run], name: str) -> float:
    """One run's standard error of its gain on held-out set `name`, from its problems alone:
    the runs' median 95% half-width over its t quantile (0 if no run stored its problems)."""
    half_width = table[f"{name} ±"].median()
    run = next((run for run in runs if run.name in table.index), None)
    if math.isnan(half_width) or run is None:
        return 0.0
    return half_width / interval_quantile(len(run.before()[name]["problems"]) - 1)


def status_table(sweeps: dict[str, list[Run]]) -> pd.DataFrame:
    """One row per run of each sweep: its steps done and asked, and whether its
    after-training scores are stored (or why not)."""
    rows = [
        {
            "sweep": label,
            "run": run.name,
            "steps done": run.completed_steps,
            "steps asked": run.settings.get("steps"),
            "after-training scores": run.missing_after() or "stored",
        }
        for label, runs in sweeps.items()
        for run in runs
    ]
    return pd.DataFrame(rows).set_index("run")
