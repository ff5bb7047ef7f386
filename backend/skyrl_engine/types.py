"""The engine's data types: what moves through one step, from a dataset row to the optimizer.

    PromptRow ──(rollout loop + TokenGenerator)──▶ Completions ──to_sample_batch──▶ SampleBatch
        ──(environments score, GeneratorOutput: samples + rewards + groups)──▶ advantages
        ──▶ TrainBatch ──(policy loss, optimizer step)──▶ new weights

Tensor names carry their shape (``_B`` one per sample, ``_BT`` per response token, ``_BP`` per prompt
token, ``_BL`` per token of prompt + response). This module imports only the standard library (torch
inside the padding helpers), so the vLLM environment and the engine's light paths can import it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Completions", "GeneratorOutput", "PromptRow", "SampleBatch", "TrainBatch", "left_pad", "pad_rows",
           "step_seed"]


@dataclass
class PromptRow:
    """One dataset row: the chat prompt plus everything the environment needs to score it."""

    prompt: list[dict[str, str]]
    env_class: str
    data_source: str
    ground_truth: Any
    extras: dict[str, Any] = field(default_factory=dict)
    """The row without ``prompt`` and ``env_class``: what SkyRL hands the environment as ``extras``."""
    raw_prompt: Any = None
    """The prompt as the data gave it (text, or the messages): what a reward function receives (None: ``prompt``)."""


@dataclass
class Completions:
    """``n`` completions for each of a batch of prompts, prompt-major: rows i*n … i*n+n-1 answer prompt i.

    ``logprobs[r][t]`` is the log-prob the sampling policy gave token ``response_ids[r][t]`` (after
    temperature, over the full vocabulary), ``finish_reasons[r]`` is ``stop`` (EOS or a stop token,
    which is kept in ``response_ids``) or ``length`` (hit ``max_generate_length``), ``policy_version``
    the weights version that sampled them.
    """

    prompt_index: list[int]
    response_ids: list[list[int]]
    logprobs: list[list[float]]
    finish_reasons: list[str]
    policy_version: int = 0
    generate_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.response_ids)

    @property
    def num_tokens(self) -> int:
        """Generated tokens in all completions."""
        return sum(len(r) for r in self.response_ids)

    def __repr__(self) -> str:
        n_prompts = len(set(self.prompt_index))
        return (
            f"Completions({len(self)} completions for {n_prompts} prompts, {self.num_tokens} tokens, "
            f"version {self.policy_version}, {self.generate_s:.3f} s)"
        )

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


@dataclass
class SampleBatch:
    """B sampled sequences: left-padded prompts + right-padded responses."""

    prompt_ids_BP: torch.Tensor
    prompt_mask_BP: torch.Tensor
    response_ids_BT: torch.Tensor
    response_mask_BT: torch.Tensor
    """1 for generated tokens (the final EOS included), 0 for padding after the end."""
    logprobs_BT: torch.Tensor
    finish_reasons: list[str]
    """``stop`` (EOS sampled) or ``length`` (hit max_generate_length)."""

    @property
    def response_lengths_B(self) -> torch.Tensor:
        """Number of generated tokens per row."""
        return self.response_mask_BT.sum(-1)


def pad_rows(rows: Sequence[Sequence[Any]], width: int, fill: Any, dtype: Any, *, left: bool = False) -> torch.Tensor:
    """``[len(rows), width]``: each row padded with ``fill`` (on the left with ``left``), as one tensor.

    The rows are padded as Python lists and converted once: a tensor per row was most of the padding's time.
    """
    import torch

    padded = [[fill] * (width - len(r)) + list(r) if left else list(r) + [fill] * (width - len(r)) for r in rows]
    return torch.tensor(padded, dtype=dtype).reshape(len(rows), width)


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids_BP, mask_BP)``: prompts left-padded to the longest one."""
    import torch

    width = max(len(p) for p in prompts)
    return (pad_rows(prompts, width, pad_id, torch.long, left=True),
            pad_rows([[1] * len(p) for p in prompts], width, 0, torch.long, left=True))


@dataclass
class GeneratorOutput:
    """One step's rollouts: ``len(rows) * n`` samples, grouped (sample i belongs to prompt i // n)."""

    samples: SampleBatch
    rewards_B: list[float]
    responses: list[str]
    prompts: list[str]
    """The prompt as the model saw it (chat template applied), one per sample."""
    group_ids_B: list[int]
    env_classes: list[str]
    data_sources: list[str]
    env_metrics: list[dict[str, Any]]
    group_size: int
    # Optional, filled by the multi-turn loop (multiturn.py) and the DAPO wrapper (dapo.py):
    loss_mask_BT: Any = None
    """Response tokens that carry loss (None: the response mask): masks env turns and filtered samples."""
    sample_columns: list[dict[str, Any]] | None = None
    """Extra run-store columns per sample (``turns``, ``discarded_reason``), merged into its row."""
    discarded: GeneratorOutput | None = None
    """Samples dropped before training (``sample_columns`` carry ``discarded_reason``); stored, not trained."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Generator-side step metrics (``dynamic_sampling/*``, ``generate/avg_num_turns``, ...)."""


def step_seed(seed: int, step: int, stream: int = 0) -> int:
    """A per-step sampling seed from the run seed: same inputs, same draws, in any process.

    ``stream`` separates training rollouts (0) from evaluation (1).
    """
    return (seed * 1_000_003 + step * 9_176 + stream * 7_919_777) % (2**63 - 1)


@dataclass
class TrainBatch:
    """B samples ready for the update: prompt (left-padded, width P) + response (right-padded, T).

    Rows come in groups: rows ``g*n .. g*n+n-1`` are the n samples of prompt g, so a mini-batch of
    m prompts is a contiguous slice of ``m*n`` rows.
    """

    sequences_BL: torch.Tensor
    attention_mask_BL: torch.Tensor
    response_mask_BT: torch.Tensor
    advantages_BT: torch.Tensor
    rollout_logprobs_BT: torch.Tensor
    group_size: int
    values_BT: torch.Tensor | None = None  # the critic's, before its update (gae only)
    returns_BT: torch.Tensor | None = None  # the critic's targets (gae only)
    ref_logprobs_BT: torch.Tensor | None = None  # the frozen reference's (use_kl_loss only)

    @property
    def num_prompt_tokens(self) -> int:
        """P: the response starts at this column of ``sequences_BL``."""
        return self.sequences_BL.shape[1] - self.response_mask_BT.shape[1]

    def rows(self, start: int, stop: int) -> TrainBatch:
        """Rows ``start:stop`` (all tensors sliced alike)."""
        return self._sliced(lambda value: value[start:stop])

    def trimmed(self) -> TrainBatch:
        """These rows without the response columns past their longest response (padding none of them uses), so a
        micro-batch's forward pass covers its own longest response, not the whole batch's."""
        used = int(self.response_mask_BT.any(0).nonzero().max()) + 1 if bool(self.response_mask_BT.any()) else 1
        cut = self.response_mask_BT.shape[1] - used
        return self._sliced(lambda value: value[:, :-cut]) if cut > 0 else self

    def _sliced(self, cut: Any) -> TrainBatch:
        """The batch with ``cut`` applied to every per-row tensor (``*_BL``, ``*_BT``), the rest kept."""
        import dataclasses

        return TrainBatch(**{
            f.name: cut(value) if f.name.endswith(("_BL", "_BT")) and value is not None else value
            for f in dataclasses.fields(self) for value in [getattr(self, f.name)]
        })
