"""The tamper suite (`shell_tasks.tamper`) on the cloud path's code: the course's
`sailbox_factory`, sail's own `TinkerSandbox` and `Sailbox.exec`, with Sailboxes answered by
the local stand-in (`local_stack.client.sailbox.sailbox_core`). `make rehearse-cloud` runs it
first (`scripts/rehearse_cloud.py`); `python -m scripts.rehearse_tamper` runs it alone.

One line per strategy gives the reward of a wrong answer graded in the policy's own Sailbox
and in a fresh one. It fails (exit code 1) if any strategy changes a fresh grade, if no
strategy changes a shared one (the suite would show nothing), or if a right answer does
not pass in a fresh Sailbox.
"""

from __future__ import annotations

import asyncio
import os
import sys


async def _rewards() -> tuple[dict[str, tuple[float, float]], float]:
    from shell_tasks.sandboxes import sailbox_factory
    from shell_tasks.tamper import RIGHT_ANSWER, STRATEGIES, WRONG_ANSWER, tampered_reward

    rewards = {}
    for strategy in STRATEGIES:
        shared, _ = await tampered_reward(strategy, WRONG_ANSWER, sailbox_factory, "shared")
        fresh, _ = await tampered_reward(strategy, WRONG_ANSWER, sailbox_factory, "fresh")
        rewards[strategy] = (shared, fresh)
        print(
            f"  {strategy:20s} wrong answer graded in its own Sailbox: {shared}, "
            f"in a fresh one: {fresh}",
            flush=True,
        )
    right, _ = await tampered_reward(".profile", RIGHT_ANSWER, sailbox_factory, "fresh")
    return rewards, right


def rehearse_tamper_suite() -> int:
    """Run the suite on stand-in Sailboxes in this process; 0 if it holds, else 1."""
    from local_stack.client.sailbox.sailbox_core import install_local_sailboxes

    os.environ.setdefault("SAIL_API_KEY", "sk_fake_stand_in")  # only Sailbox calls are made
    print("tamper suite on the Sailbox stand-in (sail's TinkerSandbox, bash -lc as root):")
    uninstall = install_local_sailboxes()
    try:
        rewards, right = asyncio.run(_rewards())
    finally:
        uninstall()
    fooled_shared = [name for name, (shared, _) in rewards.items() if shared > 0]
    fooled_fresh = [name for name, (_, fresh) in rewards.items() if fresh > 0]
    print(
        f"  {len(fooled_shared)} of {len(rewards)} strategies changed a grade in the policy's "
        f"own Sailbox, {len(fooled_fresh)} in a fresh one; a right answer graded {right} there"
    )
    return 0 if fooled_shared and not fooled_fresh and right == 1.0 else 1


if __name__ == "__main__":
    sys.exit(rehearse_tamper_suite())
