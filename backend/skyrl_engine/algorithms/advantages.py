"""Advantage estimators by SkyRL's names (``trainer.algorithm.advantage_estimator``), one function each, registered."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from skyrl_core.choices import (
    AdvantageEstimator,
)
from skyrl_core.registry import (
    ADVANTAGE_ESTIMATORS,
    register_advantage_estimator,
)
from skyrl_engine.algorithms.masked import (
    _cfg,
    masked_whiten,
)

GRPO_EPSILON = 1e-6  # SkyRL's ``epsilon`` in compute_grpo_outcome_advantage


# --------------------------------------------------------------------------------------------
# advantage estimators
# --------------------------------------------------------------------------------------------


def _group_ids(index: Any, batch_size: int) -> tuple[torch.Tensor, int]:
    """Map arbitrary group labels (ints, uid strings) to ``0..G-1``; returns (group_of_row[B], G)."""
    labels = np.asarray(index)
    if labels.shape != (batch_size,):
        raise ValueError(f"index must hold one group id per sample: shape {labels.shape}, batch size {batch_size}")
    _, inverse = np.unique(labels, return_inverse=True)
    inverse = inverse.reshape(-1)
    num_groups = int(inverse.max()) + 1 if batch_size else 0
    return torch.from_numpy(inverse.astype(np.int64)), num_groups


def _group_stats(scores_B: torch.Tensor, index: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row group size, group mean and unbiased group std of the scalar scores."""
    group_B, num_groups = _group_ids(index, scores_B.shape[0])
    group_B = group_B.to(scores_B.device)
    count_G = torch.zeros(num_groups, dtype=scores_B.dtype, device=scores_B.device).index_add_(
        0, group_B, torch.ones_like(scores_B)
    )
    sum_G = torch.zeros_like(count_G).index_add_(0, group_B, scores_B)
    mean_G = sum_G / count_G
    sq_dev_G = torch.zeros_like(count_G).index_add_(0, group_B, (scores_B - mean_G[group_B]) ** 2)
    std_G = torch.sqrt(sq_dev_G / (count_G - 1).clamp(min=1.0))
    return count_G[group_B], mean_G[group_B], std_G[group_B]


@register_advantage_estimator(AdvantageEstimator.GRPO)
def grpo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any,
                   config: Any = None,
                   values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage: each response's score against its group.

    ``s_i = sum_t r_i,t``; ``A_i = (s_i - mean_g) / (std_g + 1e-6)`` with the unbiased (n-1) std of
    the group, or ``A_i = s_i - mean_g`` when ``config.grpo_norm_by_std`` is False (Dr. GRPO). A
    group of one response uses mean 0 and std 1, as SkyRL: ``A = s / (1 + 1e-6)`` (or ``s``).
    ``A_i`` is broadcast over the response tokens; returns equal advantages.
    """
    with torch.no_grad():
        scores_B = token_level_rewards.sum(dim=-1)
        count_B, mean_B, std_B = _group_stats(scores_B, index)
        single_B = count_B < 2
        mean_B = torch.where(single_B, torch.zeros_like(mean_B), mean_B)
        std_B = torch.where(single_B, torch.ones_like(std_B), std_B)
        adv_B = scores_B - mean_B
        if _cfg(config, "grpo_norm_by_std"):
            adv_B = adv_B / (std_B + GRPO_EPSILON)
        advantages = adv_B.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_advantage_estimator(AdvantageEstimator.RLOO)
def rloo_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any,
                   config: Any = None,
                   values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """RLOO: each score against the mean of the OTHER responses of its group.

    ``A_i = s_i - mean_{j != i} s_j = (s_i - mean_g) * n / (n - 1)``; a group of one gets 0.
    """
    with torch.no_grad():
        scores_B = token_level_rewards.sum(dim=-1)
        count_B, mean_B, _ = _group_stats(scores_B, index)
        adv_B = (scores_B - mean_B) * (count_B / (count_B - 1).clamp(min=1.0))
        adv_B = torch.where(count_B > 1, adv_B, torch.zeros_like(adv_B))
        advantages = adv_B.unsqueeze(-1) * response_mask
    return advantages, advantages


@register_advantage_estimator(AdvantageEstimator.MAXRL)
def maxrl_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any,
                    config: Any = None,
                    values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """MaxRL: each score against its group's mean, relative to that mean.

    ``A_i = (s_i - mean_g) / (mean_g + 1e-6)``: with 0/1 rewards ``mean_g`` is the prompt's success rate, so a
    success on a hard prompt weighs ``1/p - 1`` and a failure ``-1`` (a maximum-likelihood objective, where
    GRPO divides by the std). A group of one keeps its raw score, ``A = s``, as SkyRL. Meant for non-negative
    rewards: a group mean near 0 with mixed-sign scores makes the advantages large. Returns equal advantages.
    """
    with torch.no_grad():
        scores_B = token_level_rewards.sum(dim=-1)
        count_B, mean_B, _ = _group_stats(scores_B, index)
        adv_B = torch.where(count_B > 1, (scores_B - mean_B) / (mean_B + GRPO_EPSILON), scores_B)
        advantages = adv_B.unsqueeze(-1) * response_mask
    return advantages, advantages


def _discounted_returns(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float) -> torch.Tensor:
    """``G_t = r_t + gamma * G_{t+1}``, restarting at masked positions (after EOS), as SkyRL."""
    returns = torch.zeros_like(token_level_rewards)
    running = torch.zeros_like(token_level_rewards[:, 0])
    for t in reversed(range(token_level_rewards.shape[1])):
        running = token_level_rewards[:, t] + gamma * running
        returns[:, t] = running
        running = running * response_mask[:, t]
    return returns


@register_advantage_estimator(AdvantageEstimator.REINFORCE_PP)
def reinforce_plus_plus_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor,
                                  index: Any = None, config: Any = None,
                                  values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted token returns (``config.gamma``), whitened over the whole batch.

    ``G_t = r_t + gamma * G_{t+1}``; ``A = mask * (G - mean(G)) / sqrt(var(G) + 1e-8)`` with the
    masked mean and unbiased variance over all response tokens of the batch. Returns ``G``.
    """
    with torch.no_grad():
        returns = _discounted_returns(token_level_rewards, response_mask, float(_cfg(config, "gamma")))
        advantages = masked_whiten(returns, response_mask) * response_mask
    return advantages, returns


@register_advantage_estimator(AdvantageEstimator.GAE)
def gae_advantage(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None,
                  config: Any = None,
                  values: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation from critic ``values[B, T]`` (``config.gamma``, ``config.lambd``).

    ``delta_t = r_t + gamma * V_{t+1} - V_t`` (``V_T = 0``), ``A_t = delta_t + gamma * lambd * A_{t+1}``,
    returns ``R = A + V`` (the critic's target), then ``A`` is whitened over the masked tokens of
    the batch. As in SkyRL the recursion runs over the full width: pass values already zeroed
    after the response ends.
    """
    if values is None:
        raise ValueError("advantage_estimator 'gae' needs critic values: compute_advantages(..., values=V[B, T])")
    gamma, lambd = float(_cfg(config, "gamma")), float(_cfg(config, "lambd"))
    with torch.no_grad():
        advantages = torch.zeros_like(token_level_rewards)
        running = torch.zeros_like(token_level_rewards[:, 0])
        width = token_level_rewards.shape[1]
        for t in reversed(range(width)):
            next_value = values[:, t + 1] if t + 1 < width else torch.zeros_like(running)
            delta = token_level_rewards[:, t] + gamma * next_value - values[:, t]
            running = delta + gamma * lambd * running
            advantages[:, t] = running
        returns = advantages + values
        advantages = masked_whiten(advantages, response_mask)
    return advantages, returns


def compute_advantages(
    name: str,
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    config: Any = None,
    values: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns ``[B, T]`` from the estimator registered as ``name``.

    ``index`` holds one group id per sample (the prompt uid or number); ``values`` are the critic's
    per-token values, needed by ``gae`` only.

    >>> r = torch.tensor([[0.0, 1.0], [0.0, 0.0]]); m = torch.ones(2, 2)
    >>> compute_advantages("rloo", r, m, np.array([0, 0]))[0]
    tensor([[ 1.,  1.],
            [-1., -1.]])
    """
    estimator = ADVANTAGE_ESTIMATORS.get(name)
    return estimator(token_level_rewards, response_mask, index, config, values=values)
