"""The metric names the engine writes and the notebook reads, where their spelling carries meaning (SkyRL's names).
The run's mean reward is the figure every view quotes; pass@n is one key per group size."""

from __future__ import annotations

import re

REWARD_KEY = "reward/avg_raw_reward"
"""The step's mean training reward (SkyRL's name): the dashboard's curve, ``reward_change``, ``list_runs``."""
REWARD_STD_KEY = "reward/std_raw_reward"
EVAL_SCORE_KEY = "eval/all/avg_score"
_PASS_AT = re.compile(r"^reward/avg_pass_at_(\d+)$")


def pass_at_key(n: int) -> str:
    """The key of pass@``n``: the share of groups of ``n`` samples with at least one reward above 0.

    >>> pass_at_key(8)
    'reward/avg_pass_at_8'
    """
    return f"reward/avg_pass_at_{int(n)}"


def pass_at_n(key: str) -> int | None:
    """``n`` when ``key`` is pass@``n``'s key, else None.

    >>> pass_at_n("reward/avg_pass_at_8"), pass_at_n("reward/avg_raw_reward")
    (8, None)
    """
    m = _PASS_AT.match(key)
    return int(m.group(1)) if m else None
