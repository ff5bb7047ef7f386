"""Policy losses by SkyRL's names (``trainer.algorithm.policy_loss_type``), per token, registered; the off-policy
correction that weighs them; and the reduction that turns them into one loss (:func:`compute_policy_loss`)."""

from __future__ import annotations

from typing import Any

import torch

from skyrl_core.choices import (
    CispoAnchor,
    LossReduction,
    PolicyLoss,
    SequenceMaskMetric,
    TISRatioType,
    values,
)
from skyrl_core.registry import (
    POLICY_LOSSES,
    register_policy_loss,
)
from skyrl_engine.algorithms.masked import (
    LOG_RATIO_CLIP,
    _cfg,
    masked_mean,
)

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
    with ``r = exp(log_probs - b)``: ``b`` the pre-update log-probs, or with ``cispo.cispo_anchor=rollout``
    (SkyRL 0.4.0) the sampler's, when ``r`` is itself the off-policy correction (so no TIS on top).
    ``clip_ratio`` is the fraction of r outside the band; ``cispo/ratio_mean``, ``cispo/ratio_clamped_mean``,
    ``cispo/ratio_max`` and ``cispo/ratio_min`` (over the response tokens) show the weight itself.
    """
    low = 1 - _cfg(config, "cispo.cispo_eps_clip_low")
    high = 1 + _cfg(config, "cispo.cispo_eps_clip_high")
    behaviour = old_log_probs
    if _cfg(config, "cispo.cispo_anchor") == CispoAnchor.ROLLOUT:
        tis = _cfg(config, "off_policy_correction.tis_ratio_type")
        if tis is not None:
            raise ValueError(f"trainer.algorithm.cispo.cispo_anchor: 'rollout' is not allowed with "
                             f"off_policy_correction.tis_ratio_type={tis}: the ratio is the correction already; "
                             "allowed: tis_ratio_type null, or cispo_anchor old")
        if rollout_logprobs is None:
            raise ValueError("trainer.algorithm.cispo.cispo_anchor: 'rollout' needs the sampler's log-probs "
                             "(rollout_logprobs), and none were given")
        behaviour = rollout_logprobs
    ratio = _ratio(log_probs, behaviour)
    clamped = ratio.clamp(low, high)
    loss = -advantages * clamped.detach() * log_probs
    with torch.no_grad():
        clip_ratio = masked_mean(((ratio < low) | (ratio > high)).float(), response_mask).item()
        active = ratio[response_mask > 0] if bool((response_mask > 0).any()) else ratio
        metrics = {"clip_ratio": clip_ratio,
                   "cispo/ratio_mean": masked_mean(ratio, response_mask).item(),
                   "cispo/ratio_clamped_mean": masked_mean(clamped, response_mask).item(),
                   "cispo/ratio_max": active.max().item(), "cispo/ratio_min": active.min().item()}
    return loss, metrics


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


def _token_budget(max_seq_len: int | None) -> int:
    if not max_seq_len:
        raise ValueError("loss_reduction 'seq_mean_token_sum_norm' needs trainer.algorithm.max_seq_len "
                         f"(a positive token budget), got {max_seq_len!r}")
    return max_seq_len


def reduction_divisor(
    response_mask: torch.Tensor,
    loss_reduction: str = LossReduction.TOKEN_MEAN,
    max_seq_len: int | None = None,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
) -> torch.Tensor:
    """The per-token divisor ``d`` with ``reduce_loss(x) == sum(x * mask / d)`` (``[B, 1]`` or a scalar tensor).

    SkyRL divides the advantages by it before a loss (``apply_loss_reduction_to_advantages_minibatch``): a
    ``summed`` loss (:mod:`skyrl_engine.algorithms.more_losses`) receives ``advantages / d``.
    """
    batch = num_sequences if num_sequences is not None else response_mask.shape[0]
    if loss_reduction == LossReduction.TOKEN_MEAN:
        tokens = num_tokens if num_tokens is not None else response_mask.sum()
        return torch.clamp(torch.as_tensor(tokens, dtype=response_mask.dtype, device=response_mask.device), min=1.0)
    if loss_reduction == LossReduction.SEQUENCE_MEAN:
        return batch * response_mask.sum(dim=-1, keepdim=True).clamp(min=1.0)
    if loss_reduction == LossReduction.SEQ_MEAN_TOKEN_SUM_NORM:
        return torch.as_tensor(float(batch * _token_budget(max_seq_len)), dtype=response_mask.dtype,
                               device=response_mask.device)
    raise ValueError(f"unknown loss_reduction {loss_reduction!r}; allowed: {', '.join(values(LossReduction))}")


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
        return masked.sum() / (batch * _token_budget(max_seq_len))
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
    the per-token loss first (:func:`compute_off_policy_correction`; its metrics join ``metrics``), except for
    the losses marked ``off_policy_correction = False``. A loss marked ``summed`` gets the advantages divided
    by :func:`reduction_divisor` and its masked sum is the loss (SkyRL's convention; see ``more_losses``).
    KL and entropy terms are separate: :func:`compute_kl_loss`, :func:`masked_entropy`.
    """
    loss_fn = POLICY_LOSSES.get(name)
    reduction = dict(loss_reduction=_cfg(config, "loss_reduction"), max_seq_len=_cfg(config, "max_seq_len"),
                     num_sequences=num_sequences, num_tokens=num_tokens)
    is_summed = getattr(loss_fn, "summed", False)
    if is_summed:  # SkyRL's convention: reduction-scaled advantages in, a masked sum out
        advantages = advantages / reduction_divisor(response_mask, **reduction)
    per_token, metrics = loss_fn(
        log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=rollout_logprobs
    )
    if rollout_logprobs is not None and getattr(loss_fn, "off_policy_correction", True):
        tis_weight, loss_mask, correction_metrics = compute_off_policy_correction(
            old_log_probs, rollout_logprobs, response_mask, config
        )
        if tis_weight is not None:
            per_token = per_token * tis_weight
        if loss_mask is not response_mask:
            # dropped tokens carry no loss, but the normaliser stays the full mask's (as in SkyRL)
            per_token = per_token * loss_mask
        metrics = {**metrics, **correction_metrics}
    if is_summed:
        return (per_token * response_mask).sum(), metrics
    return reduce_loss(per_token, response_mask, **reduction), metrics
