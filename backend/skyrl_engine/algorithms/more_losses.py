"""The policy losses beside the PPO family, by SkyRL's names: sapo, rollout_is, dppo, clip_cov, kl_cov, cross_entropy,
importance_sampling (SkyRL 0.3.0 and 0.4.0 register them all; tests/algorithms checks each against both).

Most are linear in the advantages, so they return per-token losses that :func:`compute_policy_loss` reduces, as the
PPO family does. Three are not, and follow SkyRL's convention instead (``summed``): they receive the advantages
already divided by the reduction's per-token divisor (SkyRL's ``apply_loss_reduction_to_advantages_minibatch``)
and their per-token terms are summed over the mask, with no further reduction. ``clip_cov`` and ``kl_cov`` select
tokens by a covariance of those scaled advantages; ``kl_cov``'s KL term and ``cross_entropy`` are plain sums.
``clip_cov``, ``kl_cov``, ``cross_entropy`` and ``importance_sampling`` take no off-policy correction (SkyRL applies
none to them).
"""

from __future__ import annotations

from typing import Any

import torch

from skyrl_core.choices import DPPOType, PolicyLoss, values
from skyrl_core.registry import register_policy_loss
from skyrl_engine.algorithms.masked import LOG_RATIO_CLIP, _cfg, masked_mean

DPPO_KL_EPSILON = 1e-8  # SkyRL's eps inside the binary KL's log((1 - mu + eps) / (1 - p + eps))


def summed(fn: Any) -> Any:
    """Mark a loss as taking reduction-scaled advantages and returning terms to be summed (see the module docstring)."""
    fn.summed = True
    return fn


def uncorrected(fn: Any) -> Any:
    """Mark a loss that ``off_policy_correction`` does not reweigh or mask."""
    fn.off_policy_correction = False
    return fn


def _exp_clamped(log_ratio: torch.Tensor) -> torch.Tensor:
    return log_ratio.float().clamp(-LOG_RATIO_CLIP, LOG_RATIO_CLIP).exp().to(log_ratio.dtype)


@register_policy_loss(PolicyLoss.SAPO)
def sapo_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                     response_mask: torch.Tensor, config: Any = None,
                     rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """SAPO (arXiv:2511.20347): a soft gate instead of PPO's hard clip, ``-g(r) * A`` per token.

    ``r = exp(log_probs - old_log_probs)`` (log clamped to +-20); ``g(r) = sigmoid(tau (r - 1)) * 4 / tau`` with
    ``tau = sapo.tau_pos`` where ``A > 0``, else ``sapo.tau_neg``. ``g(1) = 2 / tau`` and ``g'(1) = 1``, so near
    the old policy it is the plain policy gradient; far from it the gradient fades instead of stopping. Nothing is
    clipped: ``clip_ratio`` is 0. The paper reduces with ``sequence_mean``.
    """
    ratio = torch.exp((log_probs - old_log_probs).clamp(-LOG_RATIO_CLIP, LOG_RATIO_CLIP))
    tau = torch.where(advantages > 0,
                      torch.as_tensor(_cfg(config, "sapo.tau_pos"), dtype=advantages.dtype, device=advantages.device),
                      torch.as_tensor(_cfg(config, "sapo.tau_neg"), dtype=advantages.dtype, device=advantages.device))
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    return -gate * advantages, {"clip_ratio": 0.0}


def _need_rollout(name: str, rollout_logprobs: torch.Tensor | None) -> torch.Tensor:
    if rollout_logprobs is None:
        raise ValueError(f"trainer.algorithm.policy_loss_type: '{name}' needs the sampler's log-probs "
                         "(rollout_logprobs), and none were given")
    return rollout_logprobs


@register_policy_loss(PolicyLoss.ROLLOUT_IS)
def rollout_is_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                           response_mask: torch.Tensor, config: Any = None,
                           rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Importance-weighted policy gradient against the SAMPLER's log-probs, the weight zeroed outside a band
    (GLM-5's agentic loss; IcePop-style): ``-sg[w] * A * log_probs``.

    ``r = exp(log_probs - rollout_logprobs)`` (log clamped to +-20); ``w = r`` where
    ``1 - eps_clip_low < r < 1 + eps_clip_high``, else 0 (those tokens get no gradient). ``clip_ratio``: the
    fraction of response tokens outside the band. Needs no pre-update log-probs, so it suits async training.
    """
    ratio = _exp_clamped(log_probs - _need_rollout(PolicyLoss.ROLLOUT_IS, rollout_logprobs))
    inside = (ratio > 1 - _cfg(config, "eps_clip_low")) & (ratio < 1 + _cfg(config, "eps_clip_high"))
    weight = torch.where(inside, ratio, torch.zeros_like(ratio)).detach()
    clip_ratio = masked_mean((~inside).float(), response_mask).item()
    return -(weight * advantages * log_probs), {"clip_ratio": clip_ratio}


@register_policy_loss(PolicyLoss.DPPO)
def dppo_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                     response_mask: torch.Tensor, config: Any = None,
                     rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """DPPO (arXiv:2602.04879): ``-r * A * m``, the trust region a mask on how far the token's PROBABILITY moved.

    ``mu`` is the sampler's log-prob (the pre-update one when no rollout log-probs are given),
    ``r = exp(log_probs - mu)`` (log clamped to +-20), ``p = exp(log_probs)``, ``q = exp(mu)``. ``m = 0`` (no
    gradient) for a token that moved too far in its advantage's direction:

    - ``dppo.dppo_type=binary_tv``: ``A > 0`` and ``p - q > dppo.delta_high``, or ``A < 0`` and ``q - p > delta_low``;
    - ``binary_kl``: with ``KL = q (log q - log p) + (1 - q) log((1 - q + 1e-8) / (1 - p + 1e-8))``, ``A > 0``,
      ``p > q`` and ``KL > delta_high``, or ``A < 0``, ``p < q`` and ``KL > delta_low``.

    ``clip_ratio``: the fraction of response tokens masked.
    """
    mu = rollout_logprobs if rollout_logprobs is not None else old_log_probs
    ratio = _exp_clamped(log_probs - mu)
    kind, low, high = _cfg(config, "dppo.dppo_type"), _cfg(config, "dppo.delta_low"), _cfg(config, "dppo.delta_high")
    with torch.no_grad():
        p, q = log_probs.exp(), mu.exp()
        moved = p - q
        if kind == DPPOType.BINARY_TV:
            drop = ((advantages > 0) & (moved > high)) | ((advantages < 0) & (-moved > low))
        elif kind == DPPOType.BINARY_KL:
            kl = q * (mu - log_probs) + (1 - q) * torch.log((1 - q + DPPO_KL_EPSILON) / (1 - p + DPPO_KL_EPSILON))
            drop = (((advantages > 0) & (moved > 0) & (kl > high))
                    | ((advantages < 0) & (moved < 0) & (kl > low)))
        else:
            raise ValueError(f"trainer.algorithm.dppo.dppo_type: {kind!r} is not allowed; "
                             f"allowed: {', '.join(values(DPPOType))}")
        keep = (~drop).to(advantages.dtype)
    clip_ratio = masked_mean(drop.float(), response_mask).item()
    return -(ratio * advantages * keep), {"clip_ratio": clip_ratio}


@register_policy_loss(PolicyLoss.CLIP_COV)
@uncorrected
@summed
def clip_cov_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                         response_mask: torch.Tensor, config: Any = None,
                         rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Clip-Cov (arXiv:2505.22617): PPO's clipped loss, and a few high-covariance tokens with no gradient at all.

    Takes reduction-scaled advantages ``a`` (``summed``). Per token ``L = max(-a r, -a clip(r, 1-eps_clip_low,
    1+eps_clip_high))`` with ``r = exp(log_probs - old_log_probs)``. Among the response tokens PPO did not clip,
    those whose ``cov = (a - mean a) (log_probs - mean log_probs)`` (masked means) lies strictly inside
    ``(clip_cov.clip_cov_lb, clip_cov.clip_cov_ub)`` are candidates; ``max(1, int(clip_cov.clip_ratio * tokens))``
    of them, drawn at random (``torch.randperm`` on the default generator, as SkyRL draws), get ``L = 0``.
    ``clip_ratio``: the fraction of response tokens so zeroed.
    """
    ratio = torch.exp(log_probs - old_log_probs)
    loss1 = -advantages * ratio
    loss2 = -advantages * ratio.clamp(1 - _cfg(config, "eps_clip_low"), 1 + _cfg(config, "eps_clip_high"))
    valid = response_mask > 0
    with torch.no_grad():
        cov = ((advantages - masked_mean(advantages, response_mask))
               * (log_probs - masked_mean(log_probs, response_mask)))
        candidate = (valid & ~(loss2 > loss1) & (cov > _cfg(config, "clip_cov.clip_cov_lb"))
                     & (cov < _cfg(config, "clip_cov.clip_cov_ub")))
        where = torch.nonzero(candidate)  # row-major, as SkyRL lists them
        keep = torch.ones_like(advantages)
        if len(where):
            count = max(int(_cfg(config, "clip_cov.clip_ratio") * response_mask.sum().item()), 1)
            chosen = where[torch.randperm(len(where))[:min(count, len(where))]]
            keep[chosen[:, 0], chosen[:, 1]] = 0
    clip_ratio = masked_mean((keep == 0).float(), response_mask).item()
    return torch.maximum(loss1, loss2) * keep, {"clip_ratio": clip_ratio}


@register_policy_loss(PolicyLoss.KL_COV)
@uncorrected
@summed
def kl_cov_policy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                       response_mask: torch.Tensor, config: Any = None,
                       rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """KL-Cov (arXiv:2505.22617): the unclipped policy gradient, plus a KL penalty on the highest-covariance tokens.

    Takes reduction-scaled advantages ``a`` (``summed``). Per token ``L = -a r`` with
    ``r = exp(log_probs - old_log_probs)``; the ``max(1, int(kl_cov.kl_cov_frac * tokens))`` response tokens with
    the largest ``(a - mean a) (log_probs - mean log_probs)`` (means over the response tokens) add
    ``kl_cov.ppo_kl_coef * |log_probs - old_log_probs|``, a term the reduction does not scale (as in SkyRL).
    ``clip_ratio`` is 0.
    """
    log_ratio = log_probs - old_log_probs
    ratio = torch.exp(log_ratio)
    loss = -advantages * ratio
    valid = response_mask > 0
    flat = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    if len(flat):
        with torch.no_grad():
            a, lp = advantages[valid].reshape(-1).cpu(), log_probs[valid].detach().reshape(-1).cpu()
            cov = (a - a.mean()) * (lp - lp.mean())
            count = min(max(1, int(len(cov) * _cfg(config, "kl_cov.kl_cov_frac"))), len(cov))
            picked = flat[torch.topk(cov, count, largest=True).indices.to(flat.device)]
        width = advantages.shape[1]
        rows, cols = picked // width, picked % width
        penalty = torch.zeros_like(loss)
        penalty[rows, cols] = _cfg(config, "kl_cov.ppo_kl_coef") * log_ratio.abs()[rows, cols]
        loss = loss + penalty
    return loss, {"clip_ratio": 0.0}


@register_policy_loss(PolicyLoss.CROSS_ENTROPY)
@uncorrected
@summed
def cross_entropy_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                       response_mask: torch.Tensor, config: Any = None,
                       rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Supervised fine-tuning's loss (Tinker's ``cross_entropy``): ``-log_probs`` summed over the response tokens.

    Rewards and advantages play no part, and ``loss_reduction`` does not apply: the loss is a sum, as in SkyRL.
    ``clip_ratio`` is 0.
    """
    return -log_probs, {"clip_ratio": 0.0}


@register_policy_loss(PolicyLoss.IMPORTANCE_SAMPLING)
@uncorrected
def importance_sampling_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, advantages: torch.Tensor,
                             response_mask: torch.Tensor, config: Any = None,
                             rollout_logprobs: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """The plain importance-weighted policy gradient (Tinker's ``importance_sampling``): ``-r * A``, nothing clipped.

    ``r = exp(log_probs - old_log_probs)``. Its metric is ``importance_ratio``, the mean ``r`` over the response
    tokens (SkyRL's name; this loss reports no ``clip_ratio``).
    """
    ratio = torch.exp(log_probs - old_log_probs)
    mean_ratio = ((ratio * response_mask).sum() / response_mask.sum()).item()
    return -(ratio * advantages), {"importance_ratio": mean_ratio}
