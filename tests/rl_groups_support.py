"""Real tinker-cookbook rollout groups built by hand, for in-process tests of the course's
training-loop code (helpers/training.py, helpers/pipelined.py) without sampling anything."""

from __future__ import annotations

import tinker
from tinker_cookbook.completers import TokensWithLogprobs
from tinker_cookbook.rl.types import Trajectory, TrajectoryGroup, Transition

PROMPT = [11, 12, 13]


def rollout(
    reward: float,
    correct: float = 0.0,
    fmt: float = 1.0,
    question: str = "q0",
    tokens: tuple[int, ...] = (21, 22),
    logprobs: tuple[float, ...] | None = None,
) -> Trajectory:
    """One single-step rollout of `PROMPT` answered by `tokens`, with what MathEnv reports."""
    sampled = list(logprobs) if logprobs is not None else [-1.0] * len(tokens)
    transition = Transition(
        ob=tinker.ModelInput.from_ints(PROMPT),
        ac=TokensWithLogprobs(tokens=list(tokens), maybe_logprobs=sampled),
        reward=reward,
        episode_done=True,
        metrics={"correct": correct, "format": fmt},
        logs={"question": question},
    )
    return Trajectory(transitions=[transition], final_ob=tinker.ModelInput.empty())


def group(*trajectories: Trajectory, errors: int = 0) -> TrajectoryGroup:
    built = TrajectoryGroup(
        list(trajectories), [0.0] * len(trajectories), [{} for _ in trajectories]
    )
    built.rollout_errors.extend([object()] * errors)  # only counted by the code under test
    return built


def rewards_group(*rewards: float, question: str = "q0") -> TrajectoryGroup:
    """A group whose rollouts got `rewards` (correct when the reward is 1)."""
    return group(*(rollout(r, correct=float(r == 1.0), question=question) for r in rewards))
