"""Notebook 10's exercise: did a rate (the share of rollouts that skip `</think>`) rise, fall,
or move no more than its noise?"""

from __future__ import annotations

import math

from exercises.check import Case, Exercise, Mistake

STILL = "moved no more than its noise"


def direction(before: float, after: float, rollouts: int) -> str:
    """ "rose" or "fell" when the change exceeds two binomial standard errors, else `STILL`.
    The errors treat a group's rollouts as independent, so the band is optimistic (too narrow)."""
    noise = 2 * math.sqrt((before * (1 - before) + after * (1 - after)) / rollouts)
    return "rose" if after - before > noise else "fell" if before - after > noise else STILL


def _one_error(before: float, after: float, rollouts: int) -> str:
    noise = 2 * math.sqrt(after * (1 - after) / rollouts)
    return "rose" if after - before > noise else "fell" if before - after > noise else STILL


def _standard_deviations(before: float, after: float, rollouts: int) -> str:
    noise = 2 * math.sqrt(before * (1 - before) + after * (1 - after))
    return "rose" if after - before > noise else "fell" if before - after > noise else STILL


def _one_standard_error(before: float, after: float, rollouts: int) -> str:
    noise = math.sqrt((before * (1 - before) + after * (1 - after)) / rollouts)
    return "rose" if after - before > noise else "fell" if before - after > noise else STILL


def _any_change(before: float, after: float, rollouts: int) -> str:
    return "rose" if after > before else "fell" if after < before else STILL


def _cases() -> list[Case]:
    # First: each typical mistake answers this one its own way.
    return [
        Case("0.10 -> 0.16 over 400 rollouts at each end", (0.10, 0.16, 400)),
        Case("0.30 -> 0.22 over 400 rollouts at each end", (0.30, 0.22, 400)),
        Case("0.12 -> 0.13 over 480 rollouts: well inside the noise", (0.12, 0.13, 480)),
        Case("0.10 -> 0.13 over 400 rollouts: inside two standard errors", (0.10, 0.13, 400)),
        Case("0.10 -> 0.14 over 400 rollouts: inside the noise of both ends", (0.10, 0.14, 400)),
        Case("0.0 -> 0.0: nothing ever skipped", (0.0, 0.0, 480)),
    ]


DIRECTION = Exercise(
    name="direction",
    notebook="10_reward_hacking",
    minutes=8,
    reference=direction,
    cases=_cases,
    mistakes=[
        Mistake(
            "the standard deviation where the standard error belongs",
            "your band is a standard deviation of one rollout's 0-or-1 outcome, not of a rate "
            "over `rollouts` of them: divide each variance by `rollouts` before the square root.",
            _standard_deviations,
        ),
        Mistake(
            "one end's noise only",
            "you took the noise of the last window only. Both rates are measured, so both "
            "carry noise: the difference's variance is the sum of the two, "
            "(before (1 - before) + after (1 - after)) / rollouts.",
            _one_error,
        ),
        Mistake(
            "one standard error, not two",
            "your band is one standard error of the difference wide. A change of one standard "
            "error happens by chance about a third of the time: count a change only beyond two, "
            "2 * sqrt((before (1 - before) + after (1 - after)) / rollouts).",
            _one_standard_error,
        ),
        Mistake(
            "any change counted",
            "you called every change a rise or a fall. A rate measured on a few hundred "
            "rollouts moves by chance from one window to the next: only a change larger than "
            "two standard errors of the difference counts.",
            _any_change,
        ),
    ],
)
