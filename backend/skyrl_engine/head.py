"""The response tokens' log-probs through a frozen output layer, without the ``[positions, vocab]`` tensors.

The plain path (:func:`skyrl_engine.policy.response_logprobs`) forms the logits at every response position, divides
them by the temperature, takes their log-softmax, gathers each target's log-prob and, for the entropy, the
distribution's exponential; the backward walks the same ``[positions, vocab]`` tensors again (the gather's zeros, the
log-softmax's and the division's backward) before the output layer's matmul. On a step of the ``smollm2`` preset
that is about 300 positions × 49,152 words per micro-batch: 60 MB a tensor, above glibc's 32 MiB ceiling for heap
blocks, so each comes from a fresh ``mmap`` and is faulted in page by page, eight or so times a micro-batch.

When the output layer does not train (LoRA: the head is frozen), the gradient of a target's log-prob with respect to
the hidden state ``h`` is ``(onehot − p) · W / temperature``, with ``p`` the softmax, a row of the same size as ``h``
that does not depend on the loss. :func:`frozen_head_logprobs` computes it in the forward, a block of positions at a
time (each block's logits small enough for the heap and the cache), together with the log-probs and the entropy, and
keeps only it: the backward is one multiplication by the incoming gradient. The matmul work is the plain path's (the
logits, then ``[positions, vocab] × [vocab, hidden]``); the values equal it to float rounding
(``tests/engine/test_head.py``).

An output layer that trains (full fine-tuning) takes :func:`trained_head_logprobs` when its logits span more than one
block: the forward is the same block loop (keeping each position's log-sum-exp, no ``[positions, vocab]`` tensor), and
the backward computes the logits again a block at a time into the one ``[positions, vocab]`` buffer of
``g · (onehot − p) / temperature`` it needs, then the two gradient matmuls (into ``h`` and into the weight). That is one
matmul more than the plain path, and none of its six passes over full-size tensors: on SmolLM2's full fine-tune at
1,083 positions the plain path spent about 2.7 s of a 12.4 s one-thread step in them (``docs/benchmarks.md``). A head
whose logits fit one block (the tiny model's) keeps the plain path, where the recompute would cost more than it saves;
so does an entropy that must carry a gradient.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

#: most float32 logits per block (64 positions of a 49,152-word vocabulary), well inside glibc's heap ceiling
BLOCK_BYTES = 12 << 20


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


def block_rows(rows: int, vocab: int) -> int:
    """Positions per block of logits: ``rows`` split into the fewest blocks of at most :data:`BLOCK_BYTES` of float32
    logits, as even as they go."""
    most = max(1, BLOCK_BYTES // (4 * vocab))
    return -(-rows // -(-rows // most)) if rows else most


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
             want_grad: bool, lse_M: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Block by block: the logits, their log-softmax in place, the targets' entries, the entropy and, with
    ``want_grad``, ``(onehot - p) W / temperature``; each position's log-sum-exp of the tempered logits into
    ``lse_M`` when given."""
    import torch

    M, V = hidden_MH.shape[0], weight_VH.shape[0]
    weight_HV = weight_VH.t()
    logprobs_M = hidden_MH.new_empty(M, dtype=torch.float32)
    entropy_M = hidden_MH.new_empty(M, dtype=torch.float32)
    grad_MH = hidden_MH.new_empty(M, hidden_MH.shape[1], dtype=torch.float32) if want_grad else None
    scale = temperature > 0 and temperature != 1.0
    step = block_rows(M, V)
    for lo in range(0, M, step):
        hi = min(lo + step, M)
        target_C1 = targets_M[lo:hi, None]
        logp_CV = torch.matmul(hidden_MH[lo:hi], weight_HV).float()
        if scale:
            logp_CV.div_(temperature)
        lse_C1 = torch.logsumexp(logp_CV, dim=-1, keepdim=True)
        if lse_M is not None:
            lse_M[lo:hi] = lse_C1[:, 0]
        logp_CV.sub_(lse_C1)
        logprobs_M[lo:hi] = logp_CV.gather(1, target_C1)[:, 0]
        p_CV = logp_CV.exp()
        entropy_M[lo:hi] = -(p_CV * logp_CV).sum(dim=-1)
        if grad_MH is not None:
            p_CV.neg_().scatter_add_(1, target_C1, p_CV.new_ones(hi - lo, 1))  # onehot - p
            grad_MH[lo:hi] = torch.matmul(p_CV.to(weight_VH.dtype), weight_VH)
    if grad_MH is not None and scale:
        grad_MH.div_(temperature)
    return logprobs_M, entropy_M, grad_MH


@functools.cache
def _function() -> Any:
    """The autograd function, defined on first use (``import skyrl_engine.head`` imports no torch)."""
    import torch

    class _FrozenHead(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
            logprobs_M, entropy_M, grad_MH = _forward(hidden_MH, weight_VH, targets_M, temperature,
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


def _trained_backward(hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor, lse_M: torch.Tensor,
                      g_M: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(grad_hidden_MH, grad_weight_VH)`` of ``sum(g_M * logprobs_M)``: the logits again, block by block, turned in
    place into ``g · (onehot - p) / temperature``, then its products with the weight and with the hidden states."""
    import torch

    M, V = hidden_MH.shape[0], weight_VH.shape[0]
    scale = temperature > 0 and temperature != 1.0
    step = block_rows(M, V)
    d_MV = hidden_MH.new_empty(M, V)
    weight_HV = weight_VH.t()
    for lo in range(0, M, step):
        hi = min(lo + step, M)
        d_CV = d_MV[lo:hi]
        torch.matmul(hidden_MH[lo:hi], weight_HV, out=d_CV)
        if scale:
            d_CV.div_(temperature)
        g_C1 = g_M[lo:hi, None]
        d_CV.sub_(lse_M[lo:hi, None]).exp_().mul_(g_C1.neg())  # -g p
        d_CV.scatter_add_(1, targets_M[lo:hi, None], g_C1)  # g (onehot - p)
        if scale:
            d_CV.div_(temperature)
    return torch.matmul(d_MV, weight_VH), torch.matmul(d_MV.t(), hidden_MH)


@functools.cache
def _trained_function() -> Any:
    """The autograd function of :func:`trained_head_logprobs`, defined on first use."""
    import torch

    class _TrainedHead(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, hidden_MH: torch.Tensor, weight_VH: torch.Tensor, targets_M: torch.Tensor,
                    temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
            lse_M = hidden_MH.new_empty(hidden_MH.shape[0], dtype=torch.float32)
            logprobs_M, entropy_M, _ = _forward(hidden_MH, weight_VH, targets_M, temperature, want_grad=False,
                                                lse_M=lse_M)
            ctx.save_for_backward(hidden_MH, weight_VH, targets_M, lse_M)
            ctx.temperature = temperature
            ctx.mark_non_differentiable(entropy_M)
            return logprobs_M, entropy_M

        @staticmethod
        def backward(ctx: Any, g_M: torch.Tensor, _g_entropy: Any) -> tuple[Any, Any, None, None]:
            if g_M is None:
                return None, None, None, None
            hidden_MH, weight_VH, targets_M, lse_M = ctx.saved_tensors
            grad_MH, grad_VH = _trained_backward(hidden_MH, weight_VH, targets_M, lse_M, g_M.to(hidden_MH.dtype), ctx.temperature)
            return (grad_MH.to(hidden_MH.dtype) if ctx.needs_input_grad[0] else None,
                    grad_VH if ctx.needs_input_grad[1] else None, None, None)

    return _TrainedHead
