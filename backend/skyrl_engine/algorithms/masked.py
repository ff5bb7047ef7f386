"""Masked statistics over ``[B, T]`` tensors and the config reader the algorithms share."""

from __future__ import annotations

from typing import Any

import torch

from skyrl_core.config import AlgorithmConfig

_SCHEMA_DEFAULTS = AlgorithmConfig()  # what a missing attribute of ``config`` means

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
