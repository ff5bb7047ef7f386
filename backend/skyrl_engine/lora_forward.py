"""The forward a LoRA policy trains through: each adapted layer, and each norm LoRA leaves frozen, as one autograd node
(:func:`fuse_forward`, which :func:`skyrl_engine.lora.wrap` applies), and the frozen base products optionally in
bfloat16 (:func:`set_base_precision`, ``trainer.lora_base_precision``).

Every node gives PEFT's and transformers' values to float rounding, and steps aside (the module's own forward runs)
wherever it does not apply: adapters disabled or merged, dropout, autocast, mixed dtypes, a base weight that trains.
:mod:`skyrl_engine.lora` keeps the adapters themselves: wrapping, merging, saving and syncing them.
"""

from __future__ import annotations

import functools
from typing import Any

from skyrl_engine.prepacked import current_copy, stamp

PEFT_ADAPTER = "default"  # PEFT's name for the one adapter
_BF16_FLAG = "_skyrl_base_bf16"  # on a PEFT LoRA Linear: its base products in bfloat16 (set_base_precision)
_BF16_CACHE = "_skyrl_weight_bf16"  # on its base nn.Linear: the weight in bfloat16, stamped (prepacked.stamp)
_BF16_ROWS = 128  # bfloat16 products pad their rows to a multiple of this (_bf16_product)

__all__ = ["PEFT_ADAPTER", "base_precision", "fuse_forward", "set_base_precision"]


def fuse_forward(peft_model: Any) -> None:
    """Give each plain LoRA linear layer of ``peft_model`` a forward that computes ``x W0ᵀ + scaling · (x Aᵀ) Bᵀ``
    in one autograd node (:func:`_lora_linear_function`) instead of PEFT's four (base matmul, ``B`` matmul, scale,
    add), each of which writes an ``[tokens, out]`` tensor and walks it again in the backward. The adapter's term
    is accumulated into the base product by the matmul itself (``addmm_``), and the input's two gradients
    (through ``W0`` and through ``A``) are summed the same way.

    A layer keeps PEFT's own forward on any call the fused one does not cover: adapters disabled or merged, a
    second or variant (DoRA) adapter, dropout, extra arguments, mixed dtypes (PEFT keeps adapters in float32
    over a bf16 model), autocast, a base weight or bias that trains. The result equals PEFT's to float rounding (the
    sum is formed in another order).

    Each RMS norm of Llama's form (:func:`_llama_norm`) gets :func:`_frozen_norm_forward`: while its weight is frozen,
    as LoRA leaves it, one autograd node with a closed-form backward (:func:`_norm_function`), the same output and
    its gradient to float rounding."""
    import types

    import torch
    from peft.tuners.lora import Linear as PeftLinear

    for module in peft_model.modules():
        if type(module) is PeftLinear and isinstance(module.base_layer, torch.nn.Linear):
            module.forward = types.MethodType(_fused_forward, module)
        elif _llama_norm(type(module)):
            module.forward = types.MethodType(_frozen_norm_forward, module)


@functools.cache
def _llama_norm(cls: type) -> bool:
    """Whether ``cls`` is an RMS norm whose forward is Llama's, ``w · x / sqrt(mean(x²) + eps)`` in float32: its
    output equals :func:`_norm_function`'s bit for bit on a probe (Gemma's ``1 + w`` and other variants fail it)."""
    import torch

    if not (cls.__name__.endswith("RMSNorm") and issubclass(cls, torch.nn.Module)):
        return False
    try:
        norm = cls(24, eps=1e-5)
    except Exception:  # noqa: BLE001 - another constructor: not Llama's norm
        return False
    if set(dict(norm.named_parameters())) != {"weight"} or not hasattr(norm, "variance_epsilon"):
        return False
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(24, generator=gen) + 0.5)
        x = torch.randn(3, 24, generator=gen) * 3
        return torch.equal(cls.forward(norm, x), _norm_function().apply(x, norm.weight, norm.variance_epsilon))


def _frozen_norm_forward(norm: Any, x: Any) -> Any:
    """A Llama RMS norm's forward through :func:`_norm_function` when its weight is frozen (LoRA), else its own."""
    import torch

    if norm.weight.requires_grad or torch.is_autocast_enabled(x.device.type):
        return type(norm).forward(norm, x)
    return _norm_function().apply(x, norm.weight, norm.variance_epsilon)


@functools.cache
def _norm_function() -> Any:
    """The ``torch.autograd.Function`` of an RMS norm with a frozen weight, ``y = w · x̂``, ``x̂ = x · r``,
    ``r = (mean(x²) + eps)^-½``: the forward is transformers' own, op for op (the same values); the backward is the
    closed form ``dL/dx = r · (g w − x̂ · mean(g w · x̂))``, five passes over ``[tokens, hidden]`` where autograd's
    walk of the forward's graph takes about nine, and it keeps ``x̂`` and ``r`` alone."""
    import torch

    class FrozenNorm(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, weight: Any, eps: float) -> Any:
            xf = x.to(torch.float32)
            rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
            xhat = xf * rstd
            ctx.save_for_backward(xhat, rstd, weight)
            ctx.dtype = x.dtype
            return weight * xhat.to(x.dtype)

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            xhat, rstd, weight = ctx.saved_tensors
            gw = (g * weight).to(torch.float32)
            dot = (gw * xhat).sum(-1, keepdim=True)
            dx = torch.addcmul(gw, xhat, dot, value=-1.0 / xhat.shape[-1]).mul_(rstd)
            return dx.to(ctx.dtype), None, None

    return FrozenNorm


def _fused_forward(layer: Any, x: Any, *args: Any, **kwargs: Any) -> Any:
    """A PEFT LoRA ``Linear``'s forward through :func:`_lora_linear_function` when the call is the plain case."""
    import torch

    if (args or kwargs or layer.disable_adapters or layer.merged or list(layer.active_adapters) != [PEFT_ADAPTER]
            or PEFT_ADAPTER in layer.lora_variant or PEFT_ADAPTER not in layer.lora_A
            or not isinstance(layer.lora_dropout[PEFT_ADAPTER], torch.nn.Identity)):
        return type(layer).forward(layer, x, *args, **kwargs)
    base, a, b = layer.base_layer, layer.lora_A[PEFT_ADAPTER].weight, layer.lora_B[PEFT_ADAPTER].weight
    if (not (x.dtype == base.weight.dtype == a.dtype == b.dtype) or torch.is_autocast_enabled(x.device.type)
            or base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad)):
        return type(layer).forward(layer, x, *args, **kwargs)
    w_bf16 = _bf16_copy(base) if getattr(layer, _BF16_FLAG, False) and x.dtype == torch.float32 else None
    return _lora_linear_function().apply(x, base.weight, base.bias, a, b, float(layer.scaling[PEFT_ADAPTER]), w_bf16)


def set_base_precision(peft_model: Any, precision: str) -> None:
    """``"bf16"``: the plain LoRA layers of ``peft_model`` compute their frozen base products (the forward's
    ``x W0ᵀ`` and the backward's ``g W0``) from bfloat16 copies of ``x``/``g`` and ``W0``, accumulated in float32
    (AMX's tiles on a Xeon of the 4th generation or later: ~7× float32's rate at SmolLM2's shapes; AVX512-BF16's dot
    products on an EPYC of the 4th generation: ~2.2×); the adapters,
    their gradients, the activations, norms, attention and head stay float32. ``"fp32"``: all float32 (the
    default). ``trainer.lora_base_precision`` (:func:`base_precision` resolves ``auto``)."""
    from peft.tuners.lora import Linear as PeftLinear

    for module in peft_model.modules():
        if type(module) is PeftLinear:
            setattr(module, _BF16_FLAG, precision == "bf16")


def base_precision(setting: str, device: str = "cpu") -> str:
    """``trainer.lora_base_precision`` as the worker applies it: ``auto`` is ``bf16`` on a CPU that multiplies
    bfloat16 in hardware, with AMX-BF16 tiles (Xeon 4th generation and later: ~7× float32's rate at SmolLM2's shapes)
    or AVX512-BF16 dot products (EPYC 4th generation, Xeon 3rd: ~2.2×), and ``fp32`` elsewhere (AVX2 or AVX-512
    alone emulate bfloat16 matmuls more slowly than float32; a GPU trains under its own mixed precision)."""
    import torch

    if setting != "auto":
        return setting
    if device != "cpu":
        return "fp32"
    return "bf16" if torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported() else "fp32"


def _bf16_product(x_NK: Any, w_KM: Any) -> Any:
    """``x @ w`` for a float32 ``x`` and a bfloat16 ``w``: ``x`` rounded to bfloat16, the product accumulated in float32
    and returned in ``x``'s dtype. The rows are padded with zeros to a multiple of :data:`_BF16_ROWS`: oneDNN builds
    (and keeps) a kernel and its buffers for every distinct row count, which grew a SmolLM2 job's memory by ~1.4 GB over
    45 steps of varying token counts; in buckets of 128 rows it stays flat, for at most 127 rows of extra work."""
    import torch

    n = x_NK.shape[0]
    padded = x_NK.new_empty((-(-n // _BF16_ROWS) * _BF16_ROWS, x_NK.shape[1]), dtype=torch.bfloat16)
    padded[:n].copy_(x_NK)
    padded[n:].zero_()
    return (padded @ w_KM)[:n].to(x_NK.dtype)


def _bf16_copy(base: Any) -> Any:
    """``base``'s frozen weight in bfloat16, made once and remade when the weight changes (written in place, as
    ``load_state_dict`` or ``copy_`` do, or rebound): :func:`skyrl_engine.prepacked.current_copy`."""
    import torch

    w = base.weight
    copy = current_copy(base.__dict__.get(_BF16_CACHE), w)
    if copy is None:
        copy = w.detach().to(torch.bfloat16)
        base.__dict__[_BF16_CACHE] = stamp(w, copy)
    return copy


@functools.cache
def _lora_linear_function() -> Any:
    """The ``torch.autograd.Function`` of a LoRA linear layer, ``y = x W0ᵀ (+ bias) + s · (x Aᵀ) Bᵀ``:

    - forward: ``x Aᵀ`` (``[tokens, rank]``), then the base product, into which ``addmm_`` adds ``s · (x Aᵀ) Bᵀ``;
    - backward, from ``g = dL/dy``: ``g B · s`` (``[tokens, rank]``); ``dL/dx = g W0 + (g B s) A`` (one ``addmm_``);
      ``dL/dA = (g B s)ᵀ x``; ``dL/dB = s · gᵀ (x Aᵀ)``, formed as ``(s · (x Aᵀ)ᵀ g)ᵀ`` (``gᵀ`` read down its
      columns ran ~2.5× slower on the CPU). ``W0`` and the bias are frozen (:func:`_fused_forward` sends any other
      case to PEFT's forward), so they get none.

    Given ``w_bf16`` (:func:`set_base_precision`), ``x W0ᵀ`` and ``g W0`` are :func:`_bf16_product`'s, from that copy.
    """
    import torch

    class LoraLinear(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: Any, w_OI: Any, bias: Any, a_RI: Any, b_OR: Any, scaling: float,
                    w_bf16: Any = None) -> Any:
            x_NI = x.reshape(-1, x.shape[-1])
            xa_NR = x_NI @ a_RI.t()
            if w_bf16 is not None:
                y_NO = _bf16_product(x_NI, w_bf16.t())
                if bias is not None:
                    y_NO += bias
            else:
                y_NO = torch.addmm(bias, x_NI, w_OI.t()) if bias is not None else x_NI @ w_OI.t()
            y_NO.addmm_(xa_NR, b_OR.t(), alpha=scaling)
            ctx.save_for_backward(x_NI, xa_NR, w_OI if w_bf16 is None else w_bf16, a_RI, b_OR)
            ctx.scaling = scaling
            return y_NO.view(*x.shape[:-1], w_OI.shape[0])

        @staticmethod
        def backward(ctx: Any, g: Any) -> Any:
            x_NI, xa_NR, w_OI, a_RI, b_OR = ctx.saved_tensors
            s = ctx.scaling
            g_NO = g.reshape(-1, g.shape[-1])
            need_x, _, _, need_a, need_b, _, _ = ctx.needs_input_grad
            gxa_NR = (g_NO @ b_OR).mul_(s) if (need_x or need_a) else None
            dx = da = db = None
            if need_x:
                gw_NI = g_NO @ w_OI if w_OI.dtype == g.dtype else _bf16_product(g_NO, w_OI)
                dx = gw_NI.addmm_(gxa_NR, a_RI).view(*g.shape[:-1], w_OI.shape[1])
            if need_a:
                da = gxa_NR.t() @ x_NI
            if need_b:
                db = (xa_NR.t() @ g_NO).mul_(s).t()
            return dx, None, None, da, db, None, None

    return LoraLinear
