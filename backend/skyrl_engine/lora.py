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

import html
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyrl_engine.lora_forward import PEFT_ADAPTER as _ADAPTER
from skyrl_engine.lora_forward import fuse_forward
from skyrl_engine.models import copy_state_dict

if TYPE_CHECKING:
    from skyrl_core.config import LoraConfig

ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_DIR = "adapter"
"""Where a model directory keeps its PEFT adapter: in a folder of its own, because transformers'
``from_pretrained`` applies an ``adapter_config.json`` it finds beside a model on top of that model (here: the
merged one, which would then carry its adapter twice)."""

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
