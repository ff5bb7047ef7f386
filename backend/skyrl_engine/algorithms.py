"""RL algorithms by SkyRL's names: advantage estimators, policy losses, KL, entropy, critic loss.

Two registries (:mod:`skyrl_core.registry`), filled at import and open to users, as SkyRL's
``ppo_utils``; a job's ``plugins:`` modules add to them (in every engine process)::

    @register_advantage_estimator("my_adv")
    def my_adv(token_level_rewards, response_mask, index, config, values=None): ...

    @register_policy_loss("my_loss")
    def my_loss(log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=None): ...

The trainer only calls the stable entry points :func:`compute_advantages`,
:func:`compute_policy_loss`, :func:`compute_approx_kl`, :func:`compute_kl_loss`,
:func:`compute_entropy` and :func:`compute_value_loss`.

Shapes: ``B`` sequences (samples) in the batch, ``T`` response tokens (right-padded). Every
``[B, T]`` tensor comes with ``response_mask[B, T]``: 1.0 on trained response tokens, 0.0 elsewhere.

``config`` is duck-typed: anything with SkyRL's ``trainer.algorithm`` attribute names (the config's
``AlgorithmConfig`` section, a ``SimpleNamespace`` in tests). A missing attribute takes the schema's
default (``skyrl_core.config.AlgorithmConfig``: SkyRL's defaults, defined there once).

Loss reduction. SkyRL writes every policy loss as a masked SUM and gets ``token_mean`` etc. by
rescaling the advantages beforehand (``apply_loss_reduction_to_advantages_minibatch``). Each loss
here is linear in the advantages, so this module instead returns per-token losses and divides the
masked sum by the same normaliser; the numbers are equal (tests/algorithms/test_parity_skyrl.py).
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import torch

from skyrl_core.choices import (
    AdvantageEstimator,
    KLController,
    KLEstimator,
    LossReduction,
    PolicyLoss,
    SequenceMaskMetric,
    TISRatioType,
    values,
)
from skyrl_core.config import AlgorithmConfig
from skyrl_core.registry import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    register_advantage_estimator,
    register_policy_loss,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "register_advantage_estimator",
    "register_policy_loss",
    "compute_advantages",
    "compute_policy_loss",
    "compute_off_policy_correction",
    "reduce_loss",
    "compute_approx_kl",
    "compute_kl_loss",
    "compute_entropy",
    "masked_entropy",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "compute_value_loss",
    "apply_kl_penalty",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
]

_SCHEMA_DEFAULTS = AlgorithmConfig()  # what a missing attribute of ``config`` means

GRPO_EPSILON = 1e-6  # SkyRL's ``epsilon`` in compute_grpo_outcome_advantage
WHITEN_EPSILON = 1e-8  # SkyRL's masked_whiten: (x - mean) * rsqrt(var + 1e-8)
LOG_RATIO_CLIP = 20.0  # SkyRL's safe_exp_delta clamps log-ratios to [-20, 20] before exp


def _cfg(config: Any, dotted: str) -> Any:
    """Read ``config.<dotted>``, with the schema's default when any part is missing or ``config`` is None."""
    node = config
    for part in dotted.split("."):
        if node is None or not hasattr(node, part):
            return _cfg(_SCHEMA_DEFAULTS, dotted)
        node = getattr(node, part)
    return node


# --------------------------------------------------------------------------------------------
# masked statistics
# --------------------------------------------------------------------------------------------


def masked_mean(x: torch.Tensor, mask: torch.Tensor | None, dim: int | None = None) -> torch.Tensor:
    """Mean of ``x`` over positions where ``mask`` is 1 (all of ``x`` when ``mask`` is None).

    ``dim=None`` reduces everything to a scalar; ``dim=-1`` gives one mean per row. An all-zero mask
    gives 0, not NaN (the denominator is clamped to at least 1, as SkyRL does).
    """
    if mask is None:
        return x.mean() if dim is None else x.mean(dim=dim)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim=dim) / mask.sum(dim=dim).clamp(min=1.0)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of the masked entries of ``x`` (Bessel-corrected when ``unbiased``)."""
    centred = x - masked_mean(x, mask)
    var = masked_mean(centred * centred, mask)
    if unbiased:
        n = mask.sum()
        if n <= 1:
            raise ValueError(f"masked_var needs at least 2 unmasked entries for an unbiased variance, got {n.item()}")
        var = var * (n / (n - 1))
    return var


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Whiten ``x`` with the mean and unbiased variance of its masked entries.

    ``(x - mean) / sqrt(var + 1e-8)``; with ``shift_mean=False`` the mean is added back.
    """
    mean = masked_mean(x, mask)
    whitened = (x - mean) * torch.rsqrt(masked_var(x, mask) + WHITEN_EPSILON)
    return whitened if shift_mean else whitened + mean


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


# --------------------------------------------------------------------------------------------
# policy losses (per token; the reduction is applied by compute_policy_loss)
# --------------------------------------------------------------------------------------------


def _safe_exp(log_ratio: torch.Tensor) -> torch.Tensor:
    """``exp(log_ratio)`` with the log clamped to +-20, computed in float32 (SkyRL's ``safe_exp_delta``)."""
    return log_ratio.float().clamp(-LOG_RATIO_CLIP, LOG_RATIO_CLIP).exp().to(log_ratio.dtype)


def _ratio(log_probs: torch.Tensor, behaviour_log_probs: torch.Tensor) -> torch.Tensor:
    """``exp(log_probs - behaviour)`` with the log-ratio clamped to +-20, computed in float32."""
    return _safe_exp(log_probs - behaviour_log_probs)


def _clipped_surrogate(
    ratio: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor, config: Any
) -> tuple[torch.Tensor, float]:
    """PPO's ``-min(ratio * A, clip(ratio, 1-eps_low, 1+eps_high) * A)`` and the clipped fraction."""
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - _cfg(config, "eps_clip_low"), 1 + _cfg(config, "eps_clip_high")) * advantages
    loss = -torch.min(unclipped, clipped)
    clip_ratio = masked_mean((-clipped > -unclipped).float(), response_mask).item()
    return loss, clip_ratio


@register_policy_loss(PolicyLoss.REGULAR)
def ppo_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                    response_mask: torch.Tensor, config: Any = None,
                    rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped PPO surrogate per token: ``-min(r A, clip(r, 1-eps_clip_low, 1+eps_clip_high) A)``.

    ``r = exp(log_probs - old_log_probs)``. A separate ``eps_clip_high`` is DAPO's clip-higher.
    """
    loss, clip_ratio = _clipped_surrogate(_ratio(log_probs, old_log_probs), advantages, response_mask, config)
    return loss, {"clip_ratio": clip_ratio}


@register_policy_loss(PolicyLoss.DUAL_CLIP)
def dual_clip_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                          response_mask: torch.Tensor, config: Any = None,
                          rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Dual-clip PPO (arXiv:1912.09729): the regular loss, capped at ``-clip_ratio_c * A`` where A < 0.

    Bounds the loss of a negative-advantage token whose ratio has grown very large.
    """
    loss, clip_ratio = _clipped_surrogate(_ratio(log_probs, old_log_probs), advantages, response_mask, config)
    capped = torch.min(-advantages * _cfg(config, "clip_ratio_c"), loss)
    loss = torch.where(advantages < 0, capped, loss)
    return loss, {"clip_ratio": clip_ratio}


@register_policy_loss(PolicyLoss.GSPO)
def gspo_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                     response_mask: torch.Tensor, config: Any = None,
                     rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """GSPO-token (arXiv:2507.18071): PPO clipping on a SEQUENCE-level ratio.

    ``log s_i = masked mean over t of (log_probs - old_log_probs)``; each token uses
    ``s_i,t = sg[s_i] * pi(y_t) / sg[pi(y_t)]`` (value ``s_i``, gradient through its own token),
    its log clamped at 10, in the clipped surrogate with ``eps_clip_low/high``. The paper pairs it
    with ``loss_reduction=sequence_mean``.
    """
    seq_log_ratio_B1 = masked_mean(log_probs - old_log_probs, response_mask, dim=-1).unsqueeze(-1)
    token_log_ratio = log_probs - log_probs.detach() + seq_log_ratio_B1.detach()
    ratio = torch.exp(token_log_ratio.clamp(max=10.0))
    loss, clip_ratio = _clipped_surrogate(ratio, advantages, response_mask, config)
    return loss, {"clip_ratio": clip_ratio}


@register_policy_loss(PolicyLoss.CISPO)
def cispo_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                      response_mask: torch.Tensor, config: Any = None,
                      rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO (MiniMax-M1, arXiv:2506.13585): clip the IS weight, keep every token's gradient.

    ``loss = -A * sg[clip(r, 1 - cispo.cispo_eps_clip_low, 1 + cispo.cispo_eps_clip_high)] * log_probs``
    with ``r = exp(log_probs - old_log_probs)``; ``clip_ratio`` is the fraction of r outside the band.
    """
    low = 1 - _cfg(config, "cispo.cispo_eps_clip_low")
    high = 1 + _cfg(config, "cispo.cispo_eps_clip_high")
    ratio = _ratio(log_probs, old_log_probs)
    loss = -advantages * ratio.clamp(low, high).detach() * log_probs
    clip_ratio = masked_mean(((ratio < low) | (ratio > high)).float(), response_mask).item()
    return loss, {"clip_ratio": clip_ratio}


# --------------------------------------------------------------------------------------------
# off-policy correction (trainer.algorithm.off_policy_correction)
# --------------------------------------------------------------------------------------------


def _opc(config: Any, key: str) -> Any:
    return _cfg(config, f"off_policy_correction.{key}")


def _share(flags: torch.Tensor, total: torch.Tensor | float) -> float:
    """``flags.sum() / total`` as a float (``total`` clamped to at least 1 when it is a tensor)."""
    if isinstance(total, torch.Tensor):
        total = total.clamp(min=1)
    return float(flags.sum() / total)


def _outlier_sequence_mask(
    is_ratio: torch.Tensor, mask: torch.Tensor, config: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    """``[B, 1]``: 0 for a sequence with ANY response token's ratio outside the outlier thresholds."""
    low, high = _opc(config, "outlier_token_is_threshold_low"), _opc(config, "outlier_token_is_threshold_high")
    valid = mask > 0
    over = (is_ratio > high) & valid if high is not None else torch.zeros_like(valid)
    under = (is_ratio < low) & valid if low is not None else torch.zeros_like(valid)
    keep_B1 = ~(over | under).any(dim=-1, keepdim=True)
    rows = float(mask.shape[0])
    return keep_B1.float(), {
        "outlier_seq_masked_ratio": _share(~keep_B1, rows),
        "outlier_seq_over_high_ratio": _share(over.any(dim=-1), rows),
        "outlier_seq_under_low_ratio": _share(under.any(dim=-1), rows),
    }


def _token_mask(is_ratio: torch.Tensor, mask: torch.Tensor, config: Any) -> tuple[torch.Tensor, dict[str, float]]:
    """``[B, T]``: 0 for each response token whose ratio is outside ``[token_mask_is_threshold_low, _high]``."""
    low, high = _opc(config, "token_mask_is_threshold_low"), _opc(config, "token_mask_is_threshold_high")
    valid = mask > 0
    inside = (is_ratio >= low) & (is_ratio <= high)
    return (inside | ~valid).float(), {"token_mask_ratio": _share(~inside & valid, valid.sum())}


def _tis_weight(
    log_ratio: torch.Tensor, is_ratio: torch.Tensor, mask: torch.Tensor, kind: str, config: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    """The truncated IS weight: per token ``min(r_t, cap)`` or per sequence ``min(prod_t r_t, cap)``."""
    if kind == TISRatioType.TOKEN:
        cap = _opc(config, "token_tis_ratio_clip_high")
        capped = (is_ratio > cap) & (mask > 0)
        return is_ratio.clamp(max=cap).detach(), {"tis_token_clip_high_ratio": _share(capped, (mask > 0).sum())}
    if kind == TISRatioType.SEQUENCE:
        cap = _opc(config, "sequence_tis_ratio_clip_high")
        seq_ratio_B1 = _safe_exp((log_ratio * mask).sum(dim=-1, keepdim=True))
        return seq_ratio_B1.clamp(max=cap).detach(), {
            "tis_seq_clip_high_ratio": _share(seq_ratio_B1 > cap, float(seq_ratio_B1.shape[0]))
        }
    raise ValueError(f"trainer.algorithm.off_policy_correction.tis_ratio_type: {kind!r} is not allowed; "
                     f"allowed: None, {', '.join(values(TISRatioType))}")


def _sequence_mask(
    log_ratio: torch.Tensor, mask: torch.Tensor, metric: str, config: Any
) -> tuple[torch.Tensor, dict[str, float]]:
    """``[B, 1]``: 0 for a sequence whose geometric-mean or product ratio is outside its band."""
    seq_log_ratio_B1 = (log_ratio * mask).sum(dim=-1, keepdim=True)
    if metric == SequenceMaskMetric.GEOMETRIC:
        seq_log_ratio_B1 = seq_log_ratio_B1 / mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
        low, high = _opc(config, "geo_mask_low"), _opc(config, "geo_mask_high")
        prefix = "geo_sequence_mask"
    elif metric == SequenceMaskMetric.PRODUCT:
        low, high = _opc(config, "product_mask_low"), _opc(config, "product_mask_high")
        prefix = "product_sequence_mask"
    else:
        raise ValueError(f"trainer.algorithm.off_policy_correction.sequence_mask_metric: {metric!r} is not "
                         f"allowed; allowed: None, {', '.join(values(SequenceMaskMetric))}")
    ratio_B1 = _safe_exp(seq_log_ratio_B1)
    over, under = ratio_B1 > high, ratio_B1 < low
    keep_B1 = ~over & ~under
    rows = float(ratio_B1.shape[0])
    return keep_B1.float(), {
        f"{prefix}_masked_ratio": _share(~keep_B1, rows),
        f"{prefix}_over_high_ratio": _share(over, rows),
        f"{prefix}_under_low_ratio": _share(under, rows),
    }


def compute_off_policy_correction(
    old_log_probs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
) -> tuple[torch.Tensor | None, torch.Tensor, dict[str, float]]:
    """SkyRL's off-policy correction for sampling with a policy other than the trainer's.

    With ``r_t = exp(old_log_probs - rollout_logprobs)`` (trainer's policy before the update over
    the sampler's, log clamped to +-20) and ``c = config.off_policy_correction``, in SkyRL's order:

    1. outlier mask: drop a whole sequence if any token has ``r_t`` below
       ``c.outlier_token_is_threshold_low`` or above ``c.outlier_token_is_threshold_high`` (each optional);
    2. token mask (both ``c.token_mask_is_threshold_low/high`` set): drop tokens with ``r_t`` outside them;
    3. truncated importance sampling, ``c.tis_ratio_type``: ``"token"`` weighs token t by
       ``min(r_t, c.token_tis_ratio_clip_high)``; ``"sequence"`` weighs every token of a sequence by
       ``min(prod_t r_t, c.sequence_tis_ratio_clip_high)`` over the tokens kept so far;
    4. sequence mask, ``c.sequence_mask_metric``: drop a sequence whose ``"geometric"`` mean of
       ``r_t`` is outside ``[geo_mask_low, geo_mask_high]`` or whose ``"product"`` is outside
       ``[product_mask_low, product_mask_high]``.

    Returns ``(tis_weight, loss_mask, metrics)``: the detached weight (``[B, T]`` token, ``[B, 1]``
    sequence, None without TIS) that multiplies the per-token policy loss, the response mask with
    the dropped tokens zeroed, and SkyRL's metric names (``is_ratio_mean/std/max/min``,
    ``tis_token_clip_high_ratio``, ...). Nothing enabled: ``(None, response_mask, {})``.

    >>> old, rollout = torch.tensor([[-1.0, -2.0]]), torch.tensor([[-1.5, -1.0]])
    >>> from types import SimpleNamespace as NS
    >>> c = NS(off_policy_correction=NS(tis_ratio_type="token"))
    >>> compute_off_policy_correction(old, rollout, torch.ones(1, 2), c)[0]  # min(e^0.5, 2), e^-1
    tensor([[1.6487, 0.3679]])
    """
    tis_type, seq_metric = _opc(config, "tis_ratio_type"), _opc(config, "sequence_mask_metric")
    use_outlier = (_opc(config, "outlier_token_is_threshold_low") is not None
                   or _opc(config, "outlier_token_is_threshold_high") is not None)
    use_token_mask = (_opc(config, "token_mask_is_threshold_low") is not None
                      and _opc(config, "token_mask_is_threshold_high") is not None)
    if tis_type is None and seq_metric is None and not use_outlier and not use_token_mask:
        return None, response_mask, {}
    with torch.no_grad():
        log_ratio = old_log_probs - rollout_logprobs
        is_ratio = _ratio(old_log_probs, rollout_logprobs)
        on_mask = is_ratio * response_mask
        # SkyRL's definitions: std, max and min run over the masked tensor, padding zeros included
        metrics = {
            "is_ratio_mean": float(masked_mean(is_ratio, response_mask)),
            "is_ratio_std": float(on_mask.std()),
            "is_ratio_max": float(on_mask.max()),
            "is_ratio_min": float(on_mask.min()),
        }
        loss_mask = response_mask
        if use_outlier:
            keep, found = _outlier_sequence_mask(is_ratio, loss_mask, config)
            loss_mask, metrics = loss_mask * keep, metrics | found
        if use_token_mask:
            keep, found = _token_mask(is_ratio, loss_mask, config)
            loss_mask, metrics = loss_mask * keep, metrics | found
        tis_weight = None
        if tis_type is not None:
            tis_weight, found = _tis_weight(log_ratio, is_ratio, loss_mask, tis_type, config)
            metrics |= found
        if seq_metric is not None:
            keep, found = _sequence_mask(log_ratio, loss_mask, seq_metric, config)
            loss_mask, metrics = loss_mask * keep, metrics | found
    return tis_weight, loss_mask, metrics


def reduce_loss(
    per_token_loss: torch.Tensor,
    response_mask: torch.Tensor,
    loss_reduction: str = LossReduction.TOKEN_MEAN,
    max_seq_len: int | None = None,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss ``[B, T]`` to a scalar as SkyRL's ``loss_reduction`` does.

    - ``token_mean``: ``sum(loss * mask) / sum(mask)`` over all tokens (DAPO);
    - ``sequence_mean``: each row's masked token mean, averaged over rows;
    - ``seq_mean_token_sum_norm``: ``sum(loss * mask) / (B * max_seq_len)`` (Dr. GRPO).

    For gradient accumulation, pass the mini-batch's ``num_sequences`` (B of the whole mini-batch)
    and ``num_tokens`` (its mask sum): each micro-batch then returns its share, and the shares
    add up to the mini-batch loss, as SkyRL's mini-batch advantage rescaling gives.
    """
    batch = num_sequences if num_sequences is not None else per_token_loss.shape[0]
    masked = per_token_loss * response_mask
    if loss_reduction == LossReduction.TOKEN_MEAN:
        tokens = num_tokens if num_tokens is not None else response_mask.sum()
        return masked.sum() / torch.clamp(torch.as_tensor(tokens, dtype=masked.dtype), min=1.0)
    if loss_reduction == LossReduction.SEQUENCE_MEAN:
        per_seq = masked.sum(dim=-1) / response_mask.sum(dim=-1).clamp(min=1.0)
        return per_seq.sum() / batch
    if loss_reduction == LossReduction.SEQ_MEAN_TOKEN_SUM_NORM:
        if not max_seq_len:
            raise ValueError(
                "loss_reduction 'seq_mean_token_sum_norm' needs trainer.algorithm.max_seq_len "
                f"(a positive token budget), got {max_seq_len!r}"
            )
        return masked.sum() / (batch * max_seq_len)
    raise ValueError(f"unknown loss_reduction {loss_reduction!r}; allowed: {', '.join(values(LossReduction))}")


def compute_policy_loss(
    name: str,
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    config: Any = None,
    rollout_logprobs: torch.Tensor | None = None,
    *,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar policy loss from the loss registered as ``name``, reduced by ``config.loss_reduction``.

    Returns ``(loss, metrics)``; ``metrics["clip_ratio"]`` is the fraction of response tokens whose
    ratio was clipped. ``num_sequences``/``num_tokens``: see :func:`reduce_loss`.
    Given ``rollout_logprobs`` (the sampler's), ``config.off_policy_correction`` reweighs and masks
    the per-token loss first (:func:`compute_off_policy_correction`; its metrics join ``metrics``).
    KL and entropy terms are separate: :func:`compute_kl_loss`, :func:`masked_entropy`.
    """
    loss_fn = POLICY_LOSSES.get(name)
    per_token, metrics = loss_fn(
        log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=rollout_logprobs
    )
    if rollout_logprobs is not None:
        tis_weight, loss_mask, correction_metrics = compute_off_policy_correction(
            old_log_probs, rollout_logprobs, response_mask, config
        )
        if tis_weight is not None:
            per_token = per_token * tis_weight
        if loss_mask is not response_mask:
            # dropped tokens carry no loss, but the normaliser stays the full mask's (as in SkyRL)
            per_token = per_token * loss_mask
        metrics = {**metrics, **correction_metrics}
    loss = reduce_loss(
        per_token,
        response_mask,
        _cfg(config, "loss_reduction"),
        max_seq_len=_cfg(config, "max_seq_len"),
        num_sequences=num_sequences,
        num_tokens=num_tokens,
    )
    return loss, metrics


# --------------------------------------------------------------------------------------------
# KL, entropy, critic
# --------------------------------------------------------------------------------------------


def compute_approx_kl(
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    kl_estimator_type: str = KLEstimator.K3,
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(pi || pi_ref) estimate (Schulman, http://joschu.net/blog/kl-approx.html).

    With ``d = log_probs - ref_log_probs``: ``k1 = d``, ``abs = |d|``, ``k2 = d^2 / 2``,
    ``k3 = exp(-d) + d - 1`` (``-d`` clamped to +-20, result to +-10). Masked positions give 0.
    """
    delta = log_probs - ref_log_probs
    if kl_estimator_type == KLEstimator.K1:
        kl = delta
    elif kl_estimator_type == KLEstimator.ABS:
        kl = delta.abs()
    elif kl_estimator_type == KLEstimator.K2:
        kl = 0.5 * delta.square()
    elif kl_estimator_type == KLEstimator.K3:
        neg_delta = (-delta).clamp(-20.0, 20.0)
        kl = (neg_delta.exp() - neg_delta - 1).clamp(-10.0, 10.0)
    else:
        raise ValueError(f"unknown kl_estimator_type {kl_estimator_type!r}; allowed: {', '.join(values(KLEstimator))}")
    if response_mask is not None:
        # where(), not a product: a NaN/inf at a padded position must not leak into sums.
        kl = torch.where(response_mask.bool(), kl * response_mask, torch.zeros_like(kl))
    return kl


def compute_kl_loss(
    log_probs: torch.Tensor, ref_log_probs: torch.Tensor, response_mask: torch.Tensor, config: Any = None
) -> torch.Tensor:
    """KL loss as SkyRL's trainer adds it: per-sequence masked mean of the estimate, mean over rows.

    Multiply by ``config.kl_loss_coef`` and add to the policy loss.
    """
    kl = compute_approx_kl(log_probs, ref_log_probs, _cfg(config, "kl_estimator_type"), response_mask)
    return masked_mean(kl, response_mask, dim=-1).mean()


def compute_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dim, ``-sum(p * log p)``; ``[..., V] -> [...]``.

    Computed in at least float32 (bf16 logits lose the small probabilities otherwise).
    """
    log_p = torch.log_softmax(logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)


def masked_entropy(logits: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Mean token entropy over response tokens (SkyRL's ``policy_entropy`` and entropy-loss term).

    ``logits[B, T, V]`` aligned with ``response_mask[B, T]``; the loss subtracts
    ``entropy_loss_coef * masked_entropy`` when ``use_entropy_loss``.
    """
    return masked_mean(compute_entropy(logits), response_mask)


def compute_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    response_mask: torch.Tensor,
    value_clip: float | None = 0.2,
) -> tuple[torch.Tensor, float | None]:
    """PPO critic loss: ``0.5 * mean_rows(masked_mean_t(max((V_clip - R)^2, (V - R)^2)))``.

    ``V_clip = V_old + clamp(V - V_old, -value_clip, value_clip)``; ``value_clip=None`` drops the
    clipped term. Returns ``(loss, clipfrac)``, clipfrac the share of tokens where the clipped
    error was the larger (None without clipping). Pass ``config.value_clip``.
    """
    if value_clip is not None:
        clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)
        clipped_err = (clipped_values - returns) ** 2
        plain_err = (values - returns) ** 2
        loss = torch.max(clipped_err, plain_err)
        clipfrac: float | None = masked_mean((clipped_err > plain_err).float(), response_mask).item()
    else:
        loss = (values - returns) ** 2
        clipfrac = None
    return 0.5 * masked_mean(loss, response_mask, dim=-1).mean(), clipfrac


# --------------------------------------------------------------------------------------------
# KL in the reward
# --------------------------------------------------------------------------------------------


class FixedKLController:
    """A constant KL coefficient (``kl_ctrl.type = fixed``)."""

    def __init__(self, kl_coef: float) -> None:
        self.value = float(kl_coef)

    def update(self, current: float, n_steps: int) -> None:
        """No-op: the coefficient never changes."""

    def __repr__(self) -> str:
        return f"FixedKLController(value={self.value:g})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


class AdaptiveKLController:
    """Adaptive KL coefficient of Ziegler et al. (arXiv:1909.08593), ``kl_ctrl.type = adaptive``.

    After each batch: ``value *= 1 + clip(kl / kl_target - 1, -0.2, 0.2) * n_steps / horizon``.
    """

    def __init__(self, init_kl_coef: float, target: float, horizon: int) -> None:
        if horizon <= 0:
            raise ValueError(f"trainer.algorithm.kl_ctrl.horizon must be > 0, got {horizon}")
        self.value = float(init_kl_coef)
        self.target = float(target)
        self.horizon = horizon

    def update(self, current: float, n_steps: int) -> None:
        """Move the coefficient toward keeping the observed KL ``current`` at the target."""
        error = float(np.clip(current / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon

    def __repr__(self) -> str:
        return f"AdaptiveKLController(value={self.value:g}, target={self.target:g}, horizon={self.horizon})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def get_kl_controller(config: Any) -> FixedKLController | AdaptiveKLController:
    """The controller named by ``config.kl_ctrl.type``, starting at ``config.kl_loss_coef``."""
    kind = _cfg(config, "kl_ctrl.type")
    coef = _cfg(config, "kl_loss_coef")
    if kind == KLController.FIXED:
        return FixedKLController(coef)
    if kind == KLController.ADAPTIVE:
        return AdaptiveKLController(coef, _cfg(config, "kl_ctrl.kl_target"), _cfg(config, "kl_ctrl.horizon"))
    raise ValueError(f"trainer.algorithm.kl_ctrl.type: {kind!r} is not allowed; allowed: fixed, adaptive")


def apply_kl_penalty(
    token_level_rewards: torch.Tensor,
    log_probs: torch.Tensor,
    ref_log_probs: torch.Tensor,
    response_mask: torch.Tensor,
    controller: FixedKLController | AdaptiveKLController,
    kl_estimator_type: str = KLEstimator.K3,
) -> tuple[torch.Tensor, dict[str, float]]:
    """KL in the reward (``use_kl_in_reward``): ``r - max(0, coef) * kl`` per token, then update the controller.

    Returns the new rewards ``[B, T]`` and SkyRL's metrics ``avg_kl`` (mean over rows of the
    per-row masked mean), ``avg_kl_max`` and ``kl_loss_coef`` (the coefficient used).
    """
    with torch.no_grad():
        kl = compute_approx_kl(log_probs, ref_log_probs, kl_estimator_type, response_mask)
        coef = controller.value
        rewards = token_level_rewards - kl * max(0.0, coef)
        avg_kl = masked_mean(kl, response_mask, dim=-1).mean().item()
        avg_kl_max = kl.abs().max(dim=-1).values.mean().item()
    controller.update(current=avg_kl, n_steps=kl.shape[0])
    return rewards, {"avg_kl": avg_kl, "avg_kl_max": avg_kl_max, "kl_loss_coef": coef}
