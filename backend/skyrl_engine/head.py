"""The response tokens' log-probs through a frozen output layer, without the ``[positions, vocab]`` tensors.

The plain path (:func:`skyrl_engine.policy.response_logprobs`) forms the logits at every response position, divides
them by the temperature, takes their log-softmax, gathers each target's log-prob and, for the entropy, the
distribution's exponential; the backward walks the same ``[positions, vocab]`` tensors again (the gather's zeros, the
log-softmax's and the division's backward) before the output layer's matmul. On a step of the ``smollm2`` preset
that is about 300 positions × 49,152 words per micro-batch: 60 MB a tensor, above glibc's 32 MiB ceiling for heap
blocks, so each comes from a fresh ``mmap`` and is faulted in page by page, eight or so times a micro-batch.

Both fused paths split the logits into blocks (:func:`blocks`): chunks of positions, each swept over the vocabulary a
block of words at a time, with a running log-sum-exp, so every matmul has all of a chunk's positions on one side (a
block of 64 positions × the whole vocabulary, the earlier layout, ran the frozen head's matmul at ~150 GFLOP/s where
these run near the machine's ~420; a two-thread LoRA step of the ``smollm2`` preset went 4.90 → 4.50 s and a one-thread
full fine-tuning step 12.2 → 11.2 s, medians of 3–4 alternating runs on one captured batch).

When the output layer does not train (LoRA: the head is frozen), the gradient of a target's log-prob with respect to
the hidden state ``h`` is ``(onehot − p) · W / temperature``, with ``p`` the softmax, a row of the same size as ``h``
that does not depend on the loss. :func:`frozen_head_logprobs` computes it in the forward's sweep, together with the
log-probs and the entropy (as flash attention sums its values: ``Σ exp(z − m) W`` rescaled as the running maximum
``m`` grows), and keeps only it: the backward is one multiplication by the incoming gradient. The matmul work is the
plain path's (the logits, then ``[positions, vocab] × [vocab, hidden]``); the values equal it to float rounding
(``tests/engine/test_head.py``).

An output layer that trains (full fine-tuning) takes :func:`trained_head_logprobs` when its logits span more than one
block: the forward is the same sweep (keeping each position's log-sum-exp, no ``[positions, vocab]`` tensor), and the
backward sweeps again, turning each block's logits in place into ``g · (onehot − p)`` and adding its products into the
gradients of ``h`` and of the weight. That is one matmul more than the plain path, and none of its six passes over
full-size tensors: on SmolLM2's full fine-tune at 1,083 positions the plain path spent about 2.7 s of a 12.4 s
one-thread step in them (``docs/benchmarks.md``). A head whose logits fit one block (the tiny model's) keeps the plain
path, where the recompute would cost more than it saves; so does an entropy that must carry a gradient.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: most float32 logits per block (e.g. 1,083 positions × 2,904 words), well inside glibc's heap ceiling
BLOCK_BYTES = 12 << 20
#: most positions a block spans: more take several sweeps over the vocabulary, each block at least
#: ``BLOCK_BYTES / (4 × BLOCK_ROWS)`` words wide (1,536), where the block's matmul runs at the machine's rate
BLOCK_ROWS = 2048


def _output_layer(model: Any) -> Any:
    """The causal LM's output layer when it is a plain ``Linear`` without bias over a plain tensor (not FSDP2's
    DTensor shard, which the block matmuls cannot read whole); else None."""
    import torch

    head = getattr(model, "lm_head", None)
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return None
    return head if type(head.weight) in (torch.nn.Parameter, torch.Tensor) else None


def frozen_head(model: Any) -> Any:
    """The causal LM's output layer when :func:`frozen_head_logprobs` can stand in for it: a plain ``Linear`` without
    bias whose weight does not train; else None."""
    head = _output_layer(model)
    return head if head is not None and not head.weight.requires_grad else None


def trained_head(model: Any, positions: int) -> Any:
    """The causal LM's output layer when :func:`trained_head_logprobs` pays for ``positions`` logit rows: a plain
    float32 ``Linear`` on the CPU without bias whose weight trains, with logits that span more than one block; else
    None."""
    import torch

    head = _output_layer(model)
    if head is None or not head.weight.requires_grad or head.weight.dtype != torch.float32:
        return None
    if head.weight.device.type != "cpu" or positions * head.weight.shape[0] * 4 <= BLOCK_BYTES:
        return None
    return head


def blocks(rows: int, vocab: int) -> Iterator[tuple[int, int, list[tuple[int, int]]]]:
    """``(lo, hi, words)``: the positions ``[lo, hi)`` of each chunk of at most :data:`BLOCK_ROWS`, with the
    ``[start, stop)`` of the words each block of its logits spans (at most :data:`BLOCK_BYTES` of float32)."""
    for lo in range(0, rows, BLOCK_ROWS):
        hi = min(lo + BLOCK_ROWS, rows)
        width = max(1, min(vocab, BLOCK_BYTES // (4 * (hi - lo))))
        yield lo, hi, [(a, min(a + width, vocab)) for a in range(0, vocab, width)]


def frozen_head_logprobs(hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor,
                         temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs_M, entropy_M)``: each position's target log-prob under ``softmax(hidden W^T / temperature)``
    (float32) and the distribution's entropy (no gradient), with a gradient into ``hidden_MH`` only."""
    return _function().apply(hidden_MH, weight_VH, targets_M, temperature)


def trained_head_logprobs(hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor,
                          temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """As :func:`frozen_head_logprobs`, with a gradient into ``hidden_MH`` and into ``weight_VH`` (module docstring)."""
    return _trained_function().apply(hidden_MH, weight_VH, targets_M, temperature)


def _forward(hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor, temperature: float,
             want_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The log-probs and entropies in one sweep over the vocabulary's blocks, with a running log-sum-exp (the
    largest logit ``m``, ``s = Σ exp(z - m)`` and ``w = Σ exp(z - m) (z - m)``, rescaled when ``m`` grows: the
    entropy is ``log s - w / s``); with ``want_grad``, also ``(onehot - p) W / temperature`` in the same sweep, as
    ``W[target] - a / s`` with ``a = Σ exp(z - m) W`` rescaled alike (the way flash attention sums its values).
    ``(logprobs_M, entropy_M, lse_M, grad_MH)``, ``lse_M`` each position's log-sum-exp of the tempered logits."""
    import torch

    M, V = hidden_MH.shape[0], weight_VH.shape[0]
    scaled_MH = _tempered(hidden_MH, temperature)
    weight_HV = weight_VH.t()
    logprobs_M = hidden_MH.new_empty(M, dtype=torch.float32)
    entropy_M = hidden_MH.new_empty(M, dtype=torch.float32)
    lse_M = hidden_MH.new_empty(M, dtype=torch.float32)
    grad_MH = hidden_MH.new_empty(M, hidden_MH.shape[1], dtype=torch.float32) if want_grad else None
    for lo, hi, words in blocks(M, V):
        h_CH, t_C = scaled_MH[lo:hi], targets_M[lo:hi]
        target_C = hidden_MH.new_zeros(hi - lo, dtype=torch.float32)
        m_C = s_C = w_C = None
        a_CH = hidden_MH.new_zeros(hi - lo, hidden_MH.shape[1], dtype=torch.float32) if want_grad else None
        for a, b in words:
            z_CW = torch.matmul(h_CH, weight_HV[:, a:b]).float()
            inside_C1, at_C1 = _targets_in(t_C, a, b)
            target_C += z_CW.gather(1, at_C1)[:, 0] * inside_C1[:, 0]
            top_C = z_CW.amax(dim=1)
            if m_C is None:
                m_C, s_C, w_C = top_C, torch.zeros_like(top_C), torch.zeros_like(top_C)
            else:  # the running sums move to the larger reference
                grown_C = torch.maximum(m_C, top_C)
                rise_C, m_C = grown_C - m_C, grown_C
                alpha_C = rise_C.neg().exp()
                s_C, w_C = alpha_C * s_C, alpha_C * (w_C - s_C * rise_C)
                if a_CH is not None:
                    a_CH.mul_(alpha_C[:, None])
            u_CW = z_CW.sub_(m_C[:, None])  # z - m <= 0
            e_CW = u_CW.exp()
            s_C = s_C + e_CW.sum(dim=1)
            w_C = w_C + torch.linalg.vecdot(e_CW, u_CW)
            if a_CH is not None:
                a_CH.addmm_(e_CW, weight_VH[a:b].float())
        log_s_C = s_C.log()
        lse_M[lo:hi] = m_C + log_s_C
        logprobs_M[lo:hi] = target_C - lse_M[lo:hi]
        entropy_M[lo:hi] = log_s_C - w_C / s_C
        if grad_MH is not None:
            grad_MH[lo:hi] = weight_VH[t_C].float() - a_CH / s_C[:, None]
    if grad_MH is not None and _scales(temperature):
        grad_MH.div_(temperature)
    return logprobs_M, entropy_M, lse_M, grad_MH


def _scales(temperature: float) -> bool:
    """Whether the logits are divided by ``temperature`` (neither 0 nor 1 divides them)."""
    return temperature > 0 and temperature != 1.0


def _tempered(hidden_MH: torch.Tensor, temperature: float) -> torch.Tensor:
    """``hidden / temperature``, whose products with the weight are the tempered logits."""
    return hidden_MH / temperature if _scales(temperature) else hidden_MH


def _targets_in(t_C: torch.Tensor, a: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inside_C1, at_C1)``: which targets fall in the words ``[a, b)`` (float 1/0) and their column there (0 for
    those outside, whose entry the caller multiplies by 0)."""
    import torch

    inside = (t_C >= a) & (t_C < b)
    return inside.float()[:, None], torch.where(inside, t_C - a, 0)[:, None]


def _sweep(scaled_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor, lse_M: torch.Tensor,
           g_M: torch.Tensor, temperature: float, with_weight: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The trained head's backward: the gradients of ``sum(g_M * logprobs_M)``, the logits again block by block, each
    turned in place into ``g · (onehot - p)``: into the hidden states (``· W / temperature``) and, ``with_weight``,
    into the weight (its transpose ``· hidden / temperature``, which ``scaled_MH`` already is). All float32, the only
    type :func:`trained_head` takes."""
    import torch

    M, V = scaled_MH.shape[0], weight_VH.shape[0]
    weight_HV = weight_VH.t()
    grad_MH = scaled_MH.new_zeros(M, scaled_MH.shape[1], dtype=torch.float32)
    grad_VH = torch.zeros_like(weight_VH) if with_weight else None
    for lo, hi, words in blocks(M, V):
        h_CH, t_C, lse_C1 = scaled_MH[lo:hi], targets_M[lo:hi], lse_M[lo:hi, None]
        g_C1 = g_M[lo:hi, None]
        for a, b in words:
            d_CW = torch.matmul(h_CH, weight_HV[:, a:b]).sub_(lse_C1).exp_().neg_()  # -p
            inside_C1, at_C1 = _targets_in(t_C, a, b)
            d_CW.scatter_add_(1, at_C1, inside_C1).mul_(g_C1)  # g (onehot - p)
            grad_MH[lo:hi].addmm_(d_CW, weight_VH[a:b])
            if grad_VH is not None:
                grad_VH[a:b].addmm_(d_CW.t(), h_CH)
    if _scales(temperature):
        grad_MH.div_(temperature)
    return grad_MH, grad_VH


@functools.cache
def _function() -> Any:
    """The autograd function, defined on first use (``import skyrl_engine.head`` imports no torch)."""
    import torch

    class _FrozenHead(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
            logprobs_M, entropy_M, _, grad_MH = _forward(hidden_MH, weight_VH, targets_M, temperature,
                                                         want_grad=ctx.needs_input_grad[0])
            ctx.save_for_backward(grad_MH)
            ctx.mark_non_differentiable(entropy_M)
            ctx.hidden_dtype = hidden_MH.dtype
            return logprobs_M, entropy_M

        @staticmethod
        def backward(ctx: Any, g_M: torch.Tensor, _g_entropy: Any) -> tuple[Any, None, None, None]:
            (grad_MH,) = ctx.saved_tensors
            if grad_MH is None or g_M is None:
                return None, None, None, None
            return (grad_MH * g_M[:, None]).to(ctx.hidden_dtype), None, None, None

    return _FrozenHead


@functools.cache
def _trained_function() -> Any:
    """The autograd function of :func:`trained_head_logprobs`, defined on first use."""
    import torch

    class _TrainedHead(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
            logprobs_M, entropy_M, lse_M, _ = _forward(hidden_MH, weight_VH, targets_M, temperature, want_grad=False)
            ctx.save_for_backward(hidden_MH, weight_VH, targets_M, lse_M)
            ctx.temperature = temperature
            ctx.mark_non_differentiable(entropy_M)
            return logprobs_M, entropy_M

        @staticmethod
        def backward(ctx: Any, g_M: torch.Tensor, _g_entropy: Any) -> tuple[Any, Any, None, None]:
            if g_M is None:
                return None, None, None, None
            hidden_MH, weight_VH, targets_M, lse_M = ctx.saved_tensors
            grad_MH, grad_VH = _sweep(_tempered(hidden_MH, ctx.temperature), weight_VH, targets_M, lse_M,
                                      g_M, ctx.temperature, with_weight=ctx.needs_input_grad[1])
            return grad_MH if ctx.needs_input_grad[0] else None, grad_VH, None, None

    return _TrainedHead
