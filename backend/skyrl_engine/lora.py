"""LoRA: train low-rank adapters (PEFT) over a frozen base model, and move only the adapters around.

``trainer.policy.model.lora.rank > 0`` (SkyRL's keys) wraps the policy with PEFT's ``get_peft_model``: each
targeted linear layer ``W0`` (out × in) gains ``A`` (rank × in) and ``B`` (out × rank, zero at start) and
computes ``x W0ᵀ + scaling · (x Aᵀ) Bᵀ`` with ``scaling = alpha / rank``. Only ``A`` and ``B`` train.

Three forms of the same weights leave the policy:

- :class:`LoraAdapter` — the adapters alone, keyed by the plain model's module names: what a weight sync
  sends to the torch generator, which merges them into its own copy of the base model
  (:func:`apply_adapter`), so it samples at the base model's speed;
- :func:`merged_state_dict` — the plain model's state dict with every adapter merged,
  ``W = W0 + (B @ A) · scaling`` (:func:`merge_weight`): what vLLM engines receive and what a checkpoint's
  ``model.safetensors`` holds, so exports and ``vllm serve`` need no PEFT;
- the PEFT adapter files (``adapter/adapter_model.safetensors`` + ``adapter/adapter_config.json`` of a model
  directory, :func:`save_adapter`), which ``PeftModel.from_pretrained(base, dir + "/adapter")`` loads, and from
  which a resumed run restores its adapters.

The generator and the checkpoint merge with the same function, so the weights the torch generator samples
with are bit for bit the weights a checkpoint and its export hold.
"""

from __future__ import annotations

import functools
import html
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyrl_engine.models import copy_state_dict

if TYPE_CHECKING:
    from skyrl_core.config import LoraConfig

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_DIR = "adapter"
"""Where a model directory keeps its PEFT adapter: in a folder of its own, because transformers'
``from_pretrained`` applies an ``adapter_config.json`` it finds beside a model on top of that model (here: the
merged one, which would then carry its adapter twice)."""
_ADAPTER = "default"  # PEFT's name for the one adapter
_BF16_FLAG = "_skyrl_base_bf16"  # on a PEFT LoRA Linear: its base products in bfloat16 (set_base_precision)
_BF16_CACHE = "_skyrl_weight_bf16"  # on its base nn.Linear: (version, the weight in bfloat16)
_BF16_ROWS = 128  # bfloat16 products pad their rows to a multiple of this (_bf16_product)

__all__ = ["ADAPTER_CONFIG", "ADAPTER_DIR", "ADAPTER_WEIGHTS", "LoraAdapter", "apply_adapter", "adapter_of", "has_adapter",
           "install_adapter", "merge_weight", "merged_state_dict", "parameter_counts", "read_adapter", "save_adapter", "wrap"]


@dataclass(frozen=True)
class LoraAdapter:
    """A policy's LoRA adapters, detached on the CPU: ``{module name: (A_RI, B_OR)}`` with the module names of
    the plain (unwrapped) model (``model.layers.0.self_attn.q_proj``), and the one ``scaling`` they share."""

    tensors: dict[str, tuple[Any, Any]]
    scaling: float

    @property
    def nbytes(self) -> int:
        """Bytes of the adapters (what a sync moves instead of the whole model)."""
        return sum(a.numel() * a.element_size() + b.numel() * b.element_size() for a, b in self.tensors.values())

    def __repr__(self) -> str:
        return f"LoraAdapter({len(self.tensors)} modules, {self.nbytes / 1e6:.2f} MB, scaling={self.scaling:g})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def enabled(lora: Any) -> bool:
    """Whether a ``model.lora`` section asks for adapters (``rank > 0``)."""
    return bool(lora is not None and getattr(lora, "rank", 0))


def peft_config(lora: LoraConfig) -> Any:
    """PEFT's ``LoraConfig`` for a ``model.lora`` section (SkyRL's mapping: ``init_method`` kaiming -> PEFT's
    default ``init_lora_weights=True``)."""
    from peft import LoraConfig as PeftLoraConfig

    target = lora.target_modules if isinstance(lora.target_modules, str) else list(lora.target_modules)
    exclude = lora.exclude_modules if isinstance(lora.exclude_modules, str | None) else list(lora.exclude_modules)
    return PeftLoraConfig(task_type="CAUSAL_LM", r=int(lora.rank), lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                          target_modules=target, exclude_modules=exclude, bias="none",
                          init_lora_weights=True if lora.init_method == "kaiming" else str(lora.init_method))


def wrap(model: Any, lora: LoraConfig, seed: int) -> Any:
    """``model`` as a PEFT model whose only trainable parameters are the adapters, their random half (``A``)
    drawn from ``seed`` (``trainer.seed``: the same run starts from the same adapters).

    A ``target_modules`` that matches nothing in the model is a ValueError naming the key and the model's
    linear layers."""
    import warnings

    import torch
    from peft import get_peft_model

    try:
        with torch.random.fork_rng(), warnings.catch_warnings():
            torch.manual_seed(seed)
            # PEFT asks transformers' deprecated is_gradient_checkpointing: a FutureWarning on every wrap
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            peft_model = get_peft_model(model, peft_config(lora))
    except ValueError as err:
        names = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if type(m).__name__ == "Linear"})
        raise ValueError(f"trainer.policy.model.lora.target_modules: {lora.target_modules!r} does not fit "
                         f"{type(model).__name__} ({' '.join(str(err).split())[:160]}); its linear layers: "
                         f"{', '.join(names)}") from None
    fuse_forward(peft_model)
    return peft_model


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

    if (args or kwargs or layer.disable_adapters or layer.merged or list(layer.active_adapters) != [_ADAPTER]
            or _ADAPTER in layer.lora_variant or _ADAPTER not in layer.lora_A
            or not isinstance(layer.lora_dropout[_ADAPTER], torch.nn.Identity)):
        return type(layer).forward(layer, x, *args, **kwargs)
    base, a, b = layer.base_layer, layer.lora_A[_ADAPTER].weight, layer.lora_B[_ADAPTER].weight
    if (not (x.dtype == base.weight.dtype == a.dtype == b.dtype) or torch.is_autocast_enabled(x.device.type)
            or base.weight.requires_grad or (base.bias is not None and base.bias.requires_grad)):
        return type(layer).forward(layer, x, *args, **kwargs)
    w_bf16 = _bf16_copy(base) if getattr(layer, _BF16_FLAG, False) and x.dtype == torch.float32 else None
    return _lora_linear_function().apply(x, base.weight, base.bias, a, b, float(layer.scaling[_ADAPTER]), w_bf16)


def set_base_precision(peft_model: Any, precision: str) -> None:
    """``"bf16"``: the plain LoRA layers of ``peft_model`` compute their frozen base products (the forward's
    ``x W0ᵀ`` and the backward's ``g W0``) from bfloat16 copies of ``x``/``g`` and ``W0``, accumulated in float32
    (AMX's tiles on a Xeon of the 4th generation or later: ~7× float32's rate at SmolLM2's shapes); the adapters,
    their gradients, the activations, norms, attention and head stay float32. ``"fp32"``: all float32 (the
    default). ``trainer.lora_base_precision`` (:func:`base_precision` resolves ``auto``)."""
    from peft.tuners.lora import Linear as PeftLinear

    for module in peft_model.modules():
        if type(module) is PeftLinear:
            setattr(module, _BF16_FLAG, precision == "bf16")


def base_precision(setting: str, device: str = "cpu") -> str:
    """``trainer.lora_base_precision`` as the worker applies it: ``auto`` is ``bf16`` on a CPU with AMX-BF16 tiles
    (where bfloat16 matmuls run several times float32's rate) and ``fp32`` elsewhere (AVX2 or AVX-512 alone emulate
    bfloat16 matmuls more slowly than float32; a GPU trains under its own mixed precision)."""
    import torch

    if setting != "auto":
        return setting
    return "bf16" if device == "cpu" and torch.cpu._is_amx_tile_supported() else "fp32"


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
    """``base``'s frozen weight in bfloat16, made once and remade if the weight is written in place (its version
    counter moves, as ``load_state_dict`` or ``copy_`` make it)."""
    import torch

    w = base.weight
    cached = base.__dict__.get(_BF16_CACHE)
    if cached is None or cached[0] != (w._version, w.data_ptr()):
        cached = ((w._version, w.data_ptr()), w.detach().to(torch.bfloat16))
        base.__dict__[_BF16_CACHE] = cached
    return cached[1]


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


def _lora_layers(peft_model: Any) -> dict[str, Any]:
    """``{plain module name: LoRA layer}`` of a PEFT model."""
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    return {name: module for name, module in base.named_modules()
            if isinstance(module, LoraLayer) and _ADAPTER in module.lora_A}


def merge_weight(base_OI: Any, a_RI: Any, b_OR: Any, scaling: float) -> Any:
    """``W = W0 + (B @ A) · scaling``: a LoRA layer's weight with its adapter merged (a new tensor)."""
    return base_OI + (b_OR @ a_RI) * scaling


def _scaling(layers: dict[str, Any]) -> float:
    values = {float(layer.scaling[_ADAPTER]) for layer in layers.values()}
    if len(values) != 1:
        raise ValueError(f"LoRA layers with different scalings {sorted(values)} (rank_pattern/alpha_pattern are not "
                         "used here)")
    return values.pop()


def adapter_of(peft_model: Any) -> LoraAdapter:
    """The adapters of ``peft_model`` as a :class:`LoraAdapter` (detached CPU copies)."""
    layers = _lora_layers(peft_model)
    tensors = {name: (layer.lora_A[_ADAPTER].weight.detach().cpu().clone(),
                      layer.lora_B[_ADAPTER].weight.detach().cpu().clone()) for name, layer in layers.items()}
    return LoraAdapter(tensors=tensors, scaling=_scaling(layers))


def merged_state_dict(peft_model: Any) -> dict[str, Any]:
    """The plain model's state dict with every adapter merged (:func:`merge_weight`): loads into the unwrapped
    model class, as ``from_pretrained`` would."""
    import torch


    base = peft_model.get_base_model()
    layers = _lora_layers(peft_model)
    with torch.no_grad():
        out = copy_state_dict(base.state_dict(), lambda k: None if ".lora_" in k else k.replace(".base_layer.", "."))
        for name, layer in layers.items():
            out[f"{name}.weight"] = merge_weight(layer.base_layer.weight.detach().cpu(),
                                                 layer.lora_A[_ADAPTER].weight.detach().cpu(),
                                                 layer.lora_B[_ADAPTER].weight.detach().cpu(),
                                                 float(layer.scaling[_ADAPTER]))
    return out


def apply_adapter(model: Any, adapter: LoraAdapter, base_weights: dict[str, Any] | None) -> dict[str, Any]:
    """Set each adapted linear layer of the plain ``model`` to its base weight with ``adapter`` merged.

    ``base_weights`` are the base model's weights of those layers (None the first time: they are taken from
    ``model``, which must then still hold the base model); returns them for the next call, so adapters never
    stack on one another."""
    import torch

    modules = dict(model.named_modules())
    missing = sorted(set(adapter.tensors) - set(modules))
    if missing:
        raise ValueError(f"the LoRA adapter names modules this model lacks: {', '.join(missing[:5])}")
    if base_weights is None:
        base_weights = {name: modules[name].weight.detach().clone() for name in adapter.tensors}
    with torch.no_grad():
        for name, (a_RI, b_OR) in adapter.tensors.items():
            weight = modules[name].weight
            weight.copy_(merge_weight(base_weights[name], a_RI.to(weight.device), b_OR.to(weight.device),
                                      adapter.scaling))
    return base_weights


def parameter_counts(model: Any) -> dict[str, int]:
    """``{"total", "trainable"}`` parameter counts of a model (a PEFT model's total includes its adapters)."""
    total = trainable = 0
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    return {"total": total, "trainable": trainable}


def has_adapter(model_dir: str) -> bool:
    """Whether the model directory ``model_dir`` holds PEFT adapter files (in its ``adapter/``)."""
    return all(os.path.isfile(os.path.join(model_dir, ADAPTER_DIR, name)) for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG))


def save_adapter(peft_model: Any, model_dir: str) -> None:
    """The PEFT adapter files (``adapter_model.safetensors``, ``adapter_config.json``) into ``model_dir/adapter/``."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder = os.path.join(model_dir, ADAPTER_DIR)
    peft_model.save_pretrained(folder, safe_serialization=True)
    readme = os.path.join(folder, "README.md")
    if os.path.isfile(readme):  # PEFT's model card template: the export writes a real one
        os.remove(readme)


def read_adapter(model_dir: str) -> dict[str, Any]:
    """The adapter tensors :func:`save_adapter` wrote into ``model_dir`` (PEFT's key names)."""
    from safetensors.torch import load_file

    return load_file(os.path.join(model_dir, ADAPTER_DIR, ADAPTER_WEIGHTS))


def install_adapter(peft_model: Any, saved: dict[str, Any], where: str) -> None:
    """Set ``peft_model``'s adapters to ``saved`` (:func:`read_adapter` of ``where``); a RuntimeError naming
    ``where`` when they do not fit the model."""
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(peft_model, saved)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    wanted = {k for k in peft_model.state_dict() if ".lora_" in k}
    missing = [k for k in getattr(result, "missing_keys", []) or [] if k in wanted]
    if unexpected or missing or len(saved) != len(wanted):
        raise RuntimeError(f"{where}: the LoRA adapter does not fit this model ({len(saved)} tensors saved, "
                           f"{len(wanted)} expected; unexpected {sorted(unexpected)[:3]}, missing {sorted(missing)[:3]}): "
                           "was it trained with other trainer.policy.model.lora settings?")
