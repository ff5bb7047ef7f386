"""The trainer's forward pass over a batch's real tokens only: no padding through the model's matmuls.

The padded pass (:func:`skyrl_engine.policy.response_logits`) runs every row at the batch's widest prompt and
longest response: on a step of the ``smollm2`` preset a fifth of the tokens its linear layers multiply are padding,
and each micro-batch runs twice through the model (a prompt pass, then the responses over a reordered copy of its
cache). :class:`PackedForward` runs the model's own forward once, over one sequence of the packed tokens:

- every distinct prompt's real tokens (each prompt once, as ``trainer.share_prompt_prefix`` asks; every row's own
  with it off), then every row's real response tokens, each at its own position id: the embeddings, norms,
  projections and MLPs see a ``[1, tokens, hidden]`` input and no padding;
- attention, the one part that needs the rows apart, through an attention function registered with transformers
  (``skyrl_packed``, the model's attention implementation for the length of the call): the packed queries and keys
  go back into the padded layout (prompts left-padded to ``P``, each response after its prompt's keys), attend with
  the same additive masks as the padded pass through torch's fused ``scaled_dot_product_attention`` (its CPU
  flash kernel: about 0.2 s less than eager softmax attention on a two-thread LoRA step of the ``smollm2``
  preset), and their outputs are gathered back;
- the rotary embedding of the queries and keys as one autograd node each (:func:`rotate_qk`: transformers' values and
  gradients bit for bit, without the zero-filled halves autograd's backward of ``rotate_half`` writes and adds);
- the LM head only at the positions whose logits the loss reads (``logits_to_keep``: a row's last prompt token and
  its response tokens but the last).

Because it is the model's forward, the wrappers that hook it work unchanged (DDP, FSDP2's parameter gathering, PEFT's
LoRA layers), and gradients flow as in the padded pass (into a shared prompt from every row of its group). Its
log-probs equal the padded pass's to float rounding (``tests/engine/test_packed.py``). Architectures other than those
:func:`skyrl_engine.decode.lean_layout` accepts (pre-norm blocks, full attention through transformers' attention
interface), and batches not laid out as the sampler lays them out, take the padded pass (:func:`packed_forward` /
:meth:`PackedForward.logits` return None).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyrl_engine.decode import lean_layout, model_file
from skyrl_engine.sampler import distinct_rows, position_ids_from_mask

if TYPE_CHECKING:
    import torch

ATTENTION = "skyrl_packed"


def packed_forward(model: Any) -> PackedForward | None:
    """A :class:`PackedForward` over ``model`` (a causal LM, or one wrapped by PEFT, DDP or FSDP2), or None when the
    padded pass must run it."""
    base = getattr(model, "module", model)  # DDP's wrapped module (FSDP2 shards the model in place)
    base = base.get_base_model() if hasattr(base, "get_base_model") else base  # PEFT's
    if lean_layout(base) is None or float(getattr(base.config, "attention_dropout", 0.0) or 0.0) != 0.0:
        return None
    return PackedForward(model, base)


@dataclass
class _Layout:
    """Where the packed tokens sit in the padded layout: ``U`` distinct prompts of width ``P`` and ``B`` rows of
    ``T`` response columns; ``prompt_flat`` / ``resp_flat`` index the packed prompt / response tokens into
    ``[U * P]`` / ``[B * T]``; ``inverse_B`` is each row's prompt; the biases are the additive attention masks."""

    U: int
    P: int
    B: int
    T: int
    prompt_flat: Any
    resp_flat: Any
    inverse_B: Any
    bias_prompt: Any  # [U, 1, 1, P, P]
    bias_resp: Any  # [B, 1, 1, T, P + T]


class PackedForward:
    """``logits(ids_BL, mask_BL, P, share_prompt) -> (logits_MV, b_M, t_M)`` or None: the model's logits at every
    position that predicts a response token, ``logits_MV[m]`` predicting ``ids_BL[b_M[m], P + t_M[m]]``, for ``t``
    below the row's response length (its attended response tokens). None when the masks are not left-padded
    prompts followed by right-padded responses."""

    def __init__(self, model: Any, base: Any) -> None:
        self.model = model  # what runs the forward: the wrappers' hooks fire
        self.base = base  # the causal LM (inside the wrappers)
        self.config = base.config  # the causal LM's own, whose attention implementation the call switches
        self.dtype = base.dtype

    def logits(self, ids_BL: torch.Tensor, mask_BL: torch.Tensor, P: int, share_prompt: bool = True,
               hidden: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """See the class; with ``hidden``, the final hidden states at those positions (``[M, hidden]``, what the
        output layer would multiply) instead of the logits."""
        import torch

        B, L = ids_BL.shape
        T = L - P
        on = {"device": ids_BL.device}  # every index and mask where the batch is (CUDA on a GPU node)
        real_BL = mask_BL != 0
        p_B, r_B = real_BL[:, :P].sum(1), real_BL[:, P:].sum(1)
        if P == 0 or bool((p_B == 0).any()):
            return None
        if not (bool((real_BL[:, :P] == (torch.arange(P, **on) >= P - p_B[:, None])).all())
                and bool((real_BL[:, P:] == (torch.arange(T, **on) < r_B[:, None])).all())):
            return None  # not left-padded prompts + right-padded responses
        first_U, inverse_B = (distinct_rows(torch.cat([ids_BL[:, :P], mask_BL[:, :P]], dim=-1).tolist())
                              if share_prompt else (None, None))
        if first_U is None:
            first_U = inverse_B = torch.arange(B)
        first_U, inverse_B = first_U.to(ids_BL.device), inverse_B.to(ids_BL.device)
        U = first_U.shape[0]
        pos_BL = position_ids_from_mask(mask_BL)

        # packed order: the distinct prompts' real tokens (row-major), then every row's real response tokens
        prompt_UP = real_BL[first_U, :P]
        prompt_flat = prompt_UP.reshape(-1).nonzero()[:, 0]
        resp_flat = real_BL[:, P:].reshape(-1).nonzero()[:, 0]
        Np = prompt_flat.shape[0]
        ids_N = torch.cat([ids_BL[first_U, :P].reshape(-1)[prompt_flat], ids_BL[:, P:].reshape(-1)[resp_flat]])
        pos_N = torch.cat([pos_BL[first_U, :P].reshape(-1)[prompt_flat], pos_BL[:, P:].reshape(-1)[resp_flat]])

        # the padded pass's additive masks: causal over real keys; a response sees its prompt and its own past
        dtype = self.dtype
        low = torch.finfo(dtype).min
        allowed_UPP = torch.ones(P, P, dtype=torch.bool, **on).tril() & prompt_UP[:, None, :]
        allowed_BTK = torch.cat([real_BL[:, None, :P].expand(B, T, P),
                                 torch.ones(T, T, dtype=torch.bool, **on).tril() & real_BL[:, None, P:]], dim=-1)
        layout = _Layout(U, P, B, T, prompt_flat, resp_flat, inverse_B,
                         torch.zeros(allowed_UPP.shape, dtype=dtype, **on).masked_fill(~allowed_UPP, low)[:, None, None],
                         torch.zeros(allowed_BTK.shape, dtype=dtype, **on).masked_fill(~allowed_BTK, low)[:, None, None])

        # logit positions: t = 0 is the row's prompt's last token, t >= 1 its response token t - 1
        b_M, t_M = (torch.arange(T, **on) < r_B[:, None]).nonzero(as_tuple=True)
        last_U = prompt_UP.reshape(-1).long().cumsum(0).view(U, P)[:, -1] - 1
        resp_start_B = Np + torch.cat([r_B.new_zeros(1), r_B.cumsum(0)[:-1]])
        keep_M = torch.where(t_M == 0, last_U[inverse_B[b_M]], resp_start_B[b_M] + t_M - 1)

        unused = torch.zeros(1, 1, 1, 1, dtype=dtype, **on)  # a prepared 4-D mask: transformers builds none
        with self._attention(), self._rotary(), self._without_head(hidden):
            out = self.model(input_ids=ids_N[None], position_ids=pos_N[None], attention_mask=unused, use_cache=False,
                             logits_to_keep=keep_M, skyrl_packing=layout)
        return out.logits[0], b_M, t_M

    @contextlib.contextmanager
    def _without_head(self, on: bool) -> Iterator[None]:
        """With ``on``, the causal LM's output layer is the identity while the block runs (its forward then returns
        the hidden states it would have multiplied, at ``logits_to_keep``)."""
        if not on:
            yield
            return
        import torch

        head = self.base.lm_head
        self.base.lm_head = torch.nn.Identity()
        try:
            yield
        finally:
            self.base.lm_head = head

    @contextlib.contextmanager
    def _rotary(self) -> Iterator[None]:
        """The attention layers rotate their queries and keys through :func:`rotate_qk` while the block runs (their
        model file's ``apply_rotary_pos_emb``, which they look up at each call, is swapped for the call)."""
        module = model_file(self.base.model.layers[0].self_attn)
        was = getattr(module, "apply_rotary_pos_emb", None)
        if was is None or not _same_rotary(was):
            yield
            return
        module.apply_rotary_pos_emb = rotate_qk
        try:
            yield
        finally:
            module.apply_rotary_pos_emb = was

    @contextlib.contextmanager
    def _attention(self) -> Iterator[None]:
        """The model attends through :func:`packed_attention` while the block runs."""
        _register()
        was = self.config._attn_implementation
        self.config._attn_implementation = ATTENTION
        try:
            yield
        finally:
            self.config._attn_implementation = was


def rotate_qk(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb`` (Llama's, Qwen2's, Mistral's), the same values, each of ``q`` and ``k``
    one autograd node (:func:`_rotary_function`)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    rotary = _rotary_function()
    return rotary.apply(q, cos, sin), rotary.apply(k, cos, sin)


@functools.cache
def _same_rotary(apply: Any) -> bool:
    """Whether a model file's ``apply_rotary_pos_emb`` gives :func:`rotate_qk`'s values, bit for bit, on a probe."""
    import torch

    gen = torch.Generator().manual_seed(0)
    q, k, cos, sin = (torch.randn(*shape, generator=gen) for shape in ((1, 2, 5, 8), (1, 1, 5, 8), (1, 5, 8), (1, 5, 8)))
    try:
        want = apply(q, k, cos, sin)
    except Exception:  # noqa: BLE001 - another signature or layout: the model keeps its own
        return False
    return all(torch.equal(a, b) for a, b in zip(want, rotate_qk(q, k, cos, sin), strict=True))


@functools.cache
def _rotary_function() -> Any:
    """``x cos + rotate_half(x) sin``, ``rotate_half(x) = [-x₂, x₁]``, as transformers computes it op for op; its
    backward ``g cos + [(g sin)₂, -(g sin)₁]`` is autograd's values without the zero-filled halves its slices'
    backward writes and adds (about 70 ms of a two-thread LoRA step of the ``smollm2`` preset)."""
    import torch

    class Rotary(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            half = x.shape[-1] // 2
            ctx.save_for_backward(cos, sin)
            return (x * cos) + (torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin)

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
            cos, sin = ctx.saved_tensors
            gs = g * sin
            half = g.shape[-1] // 2
            return g * cos + torch.cat((gs[..., half:], -gs[..., :half]), dim=-1), None, None

    return Rotary


def _register() -> None:
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION, packed_attention)  # a dict update: cheap to repeat


def packed_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, attention_mask: Any,
                     scaling: float | None = None, dropout: float = 0.0, skyrl_packing: _Layout | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """Eager attention of the packed sequence (``query [1, heads, N, d]``, ``key``/``value [1, kv_heads, N, d]``)
    in the padded layout that ``skyrl_packing`` describes; ``[1, N, heads, d]``, as transformers' eager attention
    returns it."""
    import torch

    lay = skyrl_packing
    if lay is None:
        raise RuntimeError(f"the {ATTENTION!r} attention runs only inside skyrl_engine.packed.PackedForward")
    d = query.shape[-1]
    scaling = float(scaling if scaling is not None else d ** -0.5)
    q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))  # [N, heads, d]
    Np = lay.prompt_flat.shape[0]

    def padded(x_N: torch.Tensor, rows: int, width: int, flat: torch.Tensor) -> torch.Tensor:
        out = x_N.new_zeros((rows * width, *x_N.shape[1:])).index_copy_(0, flat, x_N)  # in place: no copy of the zeros
        return out.view(rows, width, *x_N.shape[1:])

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``q [R, Q, heads, d]`` over ``k, v [R, K, kv_heads, d]`` with the additive ``bias [R, 1, 1, Q, K]``
        through torch's fused attention (the query heads that share a K/V head read it in place; on the CPU the
        flash kernel, which neither keeps the scores nor their softmax for the backward). ``[R, Q, heads * d]``."""
        R, Q, heads = q.shape[0], q.shape[1], q.shape[2]
        mask = bias[:, 0]
        if mask.dtype != q.dtype:  # fsdp2's mixed precision computes in a narrower type than the model's own
            mask = mask.clamp(min=torch.finfo(q.dtype).min).to(q.dtype)
        o = torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scaling,
            enable_gqa=heads != k.shape[2])
        return o.transpose(1, 2).reshape(R, Q, heads * d)

    # split, not sliced: a slice's backward writes its gradient into zeros of the whole; split's joins the parts
    (q_p, q_r), (k_p, k_r), (v_p, v_r) = (x.split([Np, x.shape[0] - Np]) for x in (q, k, v))
    k_prompt = padded(k_p, lay.U, lay.P, lay.prompt_flat)
    v_prompt = padded(v_p, lay.U, lay.P, lay.prompt_flat)
    o_prompt = attend(padded(q_p, lay.U, lay.P, lay.prompt_flat), k_prompt, v_prompt, lay.bias_prompt)
    # index_select, not x[index]: its backward is an index_add_, where indexing's is an accumulating index_put_
    # (slower on CPU, and sorted first under the deterministic mode the workers run in)
    k_resp = torch.cat([k_prompt.index_select(0, lay.inverse_B), padded(k_r, lay.B, lay.T, lay.resp_flat)], dim=1)
    v_resp = torch.cat([v_prompt.index_select(0, lay.inverse_B), padded(v_r, lay.B, lay.T, lay.resp_flat)], dim=1)
    o_resp = attend(padded(q_r, lay.B, lay.T, lay.resp_flat), k_resp, v_resp, lay.bias_resp)
    o = torch.cat([o_prompt.reshape(lay.U * lay.P, -1).index_select(0, lay.prompt_flat),
                   o_resp.reshape(lay.B * lay.T, -1).index_select(0, lay.resp_flat)])
    return o.view(1, o.shape[0], query.shape[1], d), None
