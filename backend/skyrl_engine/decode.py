"""One decode position of a batch, straight through a Llama-family model's own modules.

transformers' forward wraps every decode step in its generic machinery (input checks, a 4-D mask built per call,
output recorders, keyword plumbing through each layer): on 2 CPU cores that costs more per step than SmolLM2's
matmuls at the sampler's batch sizes. :class:`LeanDecoder` runs the same computation (the model's own norms,
projections, rotary embedding and MLPs, the same operations in the same order) with only the tensor work:
eager attention (as the trainer's forward) over the cache, with grouped-query heads reading their shared K/V in place
(no copy per query head), one additive mask per step, the LM head on the one position; the MLPs' and the LM head's
large weights multiply through copies reordered once for oneDNN (:mod:`skyrl_engine.prepacked`). Its logits equal
transformers' forward's to float rounding; the prefill still goes through transformers (one call per batch).

Model types it knows (the decoder layer is the pre-norm Llama block, full attention on every layer): ``llama``,
``qwen2``, ``mistral``. Anything else decodes through transformers (:func:`lean_decoder` returns None).
"""

from __future__ import annotations

import sys
from typing import Any

from skyrl_engine.prepacked import Prepacked

LEAN_MODEL_TYPES = frozenset({"llama", "qwen2", "mistral"})


def lean_layout(model: Any) -> Any:
    """``model`` itself when it is a causal LM of a Llama-family architecture laid out as transformers lays it out
    (``model.model.{embed_tokens, layers, rotary_emb, norm}``, ``model.lm_head``, pre-norm blocks with full attention
    and SiLU MLPs), else None. :class:`LeanDecoder` and :class:`skyrl_engine.packed.PackedForward` run such a model
    through its own modules."""
    config = getattr(model, "config", None)
    if getattr(config, "model_type", None) not in LEAN_MODEL_TYPES:
        return None
    if getattr(config, "hidden_act", "silu") != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return None
    if any(kind != "full_attention" for kind in (getattr(config, "layer_types", None) or ())):
        return None  # sliding-window layers: transformers' masks know their window
    if getattr(config, "use_sliding_window", False):
        return None
    body = getattr(model, "model", None)
    if not all(hasattr(body, name) for name in ("embed_tokens", "layers", "rotary_emb", "norm")):
        return None  # wrapped (an adapter library's model) or laid out otherwise: transformers' forward
    if not hasattr(model, "lm_head"):
        return None
    return model


def model_file(attn: Any) -> Any:
    """An attention module's own transformers model file (``modeling_llama``, ...), whose functions it calls."""
    return sys.modules[type(attn).__module__]


def rotary_of(attn: Any) -> Any:
    """The ``apply_rotary_pos_emb`` of an attention module's own transformers model file."""
    return model_file(attn).apply_rotary_pos_emb


def lean_decoder(model: Any) -> LeanDecoder | None:
    """A :class:`LeanDecoder` for ``model`` when its architecture is one it runs exactly, else None."""
    return LeanDecoder(model) if lean_layout(model) is not None else None


class LeanDecoder:
    """``decoder(token_A, position_A, mask_AL, cache) -> logits_AV`` for rows whose prompts are already in ``cache``
    (a transformers ``Cache``; each layer's ``update`` appends the new position and returns the whole K/V)."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.body = model.model
        attn = self.body.layers[0].self_attn
        self.head_dim = int(attn.head_dim)
        self.apply_rotary = rotary_of(attn)
        self.packs = Prepacked()  # for this decoder's life: one sample() call

    def __call__(self, token_A: Any, position_A: Any, mask_AL: Any, cache: Any) -> Any:
        import torch

        A, d = token_A.shape[0], self.head_dim
        h = self.body.embed_tokens(token_A[:, None])  # [A, 1, hidden]
        cos, sin = self.body.rotary_emb(h, position_A[:, None])
        bias_A11L = torch.zeros(mask_AL.shape, dtype=h.dtype).masked_fill(mask_AL == 0, torch.finfo(h.dtype).min)
        bias_A11L = bias_A11L[:, None, None, :]
        for i, layer in enumerate(self.body.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            q = attn.q_proj(x).view(A, 1, -1, d).transpose(1, 2)
            k = attn.k_proj(x).view(A, 1, -1, d).transpose(1, 2)
            v = attn.v_proj(x).view(A, 1, -1, d).transpose(1, 2)
            q, k = self.apply_rotary(q, k, cos, sin)
            k, v = cache.layers[i].update(k, v)
            # eager attention, as the trainer's forward computes it; the query heads that share a K/V head are that
            # head's query rows (grouped-query attention without copying K/V per query head)
            scores = torch.matmul(q.reshape(A, k.shape[1], -1, d), k.transpose(2, 3)) * attn.scaling + bias_A11L
            o = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype), v)
            h = h + attn.o_proj(o.reshape(A, 1, -1))
            h = h + self._mlp(layer.mlp, layer.post_attention_layernorm(h))
        return self.packs.module(self.model.lm_head, self.body.norm(h))[:, -1, :]

    def _mlp(self, mlp: Any, x: Any) -> Any:
        """The Llama MLP's ``down(act(gate(x)) * up(x))``, its large weights reordered (:mod:`skyrl_engine.prepacked`)."""
        lin = self.packs.module
        return lin(mlp.down_proj, mlp.act_fn(lin(mlp.gate_proj, x)) * lin(mlp.up_proj, x))
