"""KL (as a loss and in the reward, with its controllers), entropy and the critic's value loss."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import torch

from skyrl_core.choices import (
    KLController,
    KLEstimator,
    values,
)
from skyrl_engine.algorithms.masked import (
    _cfg,
    masked_mean,
)

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
