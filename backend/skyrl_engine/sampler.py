"""A batched torch sampler with a KV cache: the generator's inference engine on CPU.

Log-probs convention (same as SkyRL's trainer, which divides logits by the sampling temperature):
``logprobs_BT[b, t]`` is the log-probability of the sampled token under
``softmax(logits / temperature)`` over the FULL vocabulary — top-k / top-p / min-p only decide which
tokens may be drawn, they do not renormalise the reported log-probs. With ``temperature == 0``
(greedy) the log-probs are those of the untempered model (temperature 1).

Layout: prompts are left-padded to a common width ``P``; responses are right-padded to ``T``.
Position ids count real tokens only, so a left-padded row sees the same positions as unpadded.
The trainer's forward pass uses exactly this layout, so its log-probs match the sampler's.

Decoding (issue 38: generation near its floor on CPU): the KV cache grows in place (no copy of the whole cache per
token), rows that finished leave the batch once a quarter of it has, Llama-family models decode through
:mod:`skyrl_engine.decode` (the model's own modules without transformers' per-call machinery), and each row draws
its token by the inverse CDF at its own uniform (one per row and position: a row's sample does not depend on the
other rows, and no random number is drawn per vocabulary entry).
"""

from __future__ import annotations

import html
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from skyrl_core.config import SamplingParams
from skyrl_engine.decode import lean_decoder
from skyrl_engine.lora import LoraAdapter, apply_adapter
from skyrl_engine.models import load_model
from skyrl_engine.types import Completions, SampleBatch, left_pad

if TYPE_CHECKING:
    import torch

    from skyrl_engine.lora import LoraAdapter

__all__ = ["SampleBatch", "SamplingParams", "TorchSampler", "filter_logits", "left_pad", "position_ids_from_mask",
           "sample"]


def distinct_rows(rows: Sequence[Sequence[int]]) -> tuple[torch.Tensor, torch.Tensor] | tuple[None, None]:
    """``(first_U, inverse_B)`` when some of ``rows`` repeat (a group's n samples share their prompt): the first
    row of each distinct value, and for every row the position of its value in ``first_U``. ``(None, None)``
    when every row is distinct: nothing to share."""
    import torch

    seen: dict[tuple[int, ...], int] = {}
    inverse = [seen.setdefault(tuple(row), len(seen)) for row in rows]
    if len(seen) == len(inverse):
        return None, None
    first = [0] * len(seen)
    for b in range(len(inverse) - 1, -1, -1):
        first[inverse[b]] = b
    return torch.tensor(first), torch.tensor(inverse)


def position_ids_from_mask(mask_BL: torch.Tensor) -> torch.Tensor:
    """0-based positions counting only real tokens (padding gets 0)."""
    return (mask_BL.cumsum(-1) - 1).clamp(min=0)


def filter_logits(logits_BV: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Mask (to -inf) the tokens top-k, top-p and min-p exclude; ``logits_BV`` already tempered."""
    import torch

    neg_inf = torch.finfo(logits_BV.dtype).min
    if params.top_k is not None and params.top_k > 0 and params.top_k < logits_BV.shape[-1]:
        kth_B1 = torch.topk(logits_BV, params.top_k, dim=-1).values[:, -1:]
        logits_BV = logits_BV.masked_fill(logits_BV < kth_B1, neg_inf)
    if params.min_p and params.min_p > 0.0:
        probs_BV = torch.softmax(logits_BV, dim=-1)
        floor_B1 = params.min_p * probs_BV.max(dim=-1, keepdim=True).values
        logits_BV = logits_BV.masked_fill(probs_BV < floor_B1, neg_inf)
    if params.top_p is not None and params.top_p < 1.0:
        sorted_BV, order_BV = torch.sort(logits_BV, descending=True, dim=-1)
        cum_BV = torch.softmax(sorted_BV, dim=-1).cumsum(-1)
        # drop a token when the mass before it already reaches top_p (the first token always stays)
        drop_sorted_BV = (cum_BV - torch.softmax(sorted_BV, dim=-1)) >= params.top_p
        drop_BV = torch.zeros_like(drop_sorted_BV).scatter(-1, order_BV, drop_sorted_BV)
        logits_BV = logits_BV.masked_fill(drop_BV, neg_inf)
    return logits_BV


def _draw(logits_AV: torch.Tensor, params: SamplingParams, uniform_A: torch.Tensor):
    """``(token_A, logprob_A)`` for one decoding position of the rows still decoding.

    A row's token is the inverse CDF of its filtered distribution at its own uniform ``uniform_A`` (one draw per row
    and position), so what a row samples does not depend on which other rows are still in the batch."""
    import torch

    if params.temperature <= 0.0:
        logp_AV = torch.log_softmax(logits_AV.float(), dim=-1)
        token_A = logits_AV.argmax(dim=-1)
        return token_A, logp_AV.gather(-1, token_A[:, None])[:, 0]
    tempered_AV = logits_AV.float() / params.temperature
    logp_AV = torch.log_softmax(tempered_AV, dim=-1)
    cdf_AV = torch.softmax(filter_logits(tempered_AV, params), dim=-1).double().cumsum(-1)
    # the first token whose cumulative mass passes u x total: it has mass > 0 (its CDF step is strictly up)
    target_A1 = uniform_A.double()[:, None] * cdf_AV[:, -1:]
    token_A = torch.searchsorted(cdf_AV, target_A1, right=True)[:, 0].clamp(max=logits_AV.shape[-1] - 1)
    return token_A, logp_AV.gather(-1, token_A[:, None])[:, 0]


def _growing_layer(reserve: int):
    """A transformers cache layer whose keys and values are views into a buffer with room for ``reserve`` more
    positions: a decode step writes its one position in place instead of copying the whole cache (``torch.cat``),
    and dropping finished rows indexes the buffer once."""
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        def __init__(self) -> None:
            super().__init__()
            self._k: Any = None
            self._v: Any = None
            self._n = 0

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            s = key_states.shape[-2]
            if self._k is None or self._n + s > self._k.shape[-2]:
                shape = (*key_states.shape[:-2], self._n + s + reserve, key_states.shape[-1])
                k, v = key_states.new_empty(shape), value_states.new_empty(shape)
                if self._n:
                    k[..., :self._n, :] = self._k[..., :self._n, :]
                    v[..., :self._n, :] = self._v[..., :self._n, :]
                self._k, self._v = k, v
            self._k[..., self._n:self._n + s, :] = key_states
            self._v[..., self._n:self._n + s, :] = value_states
            self._n += s
            self.keys, self.values = self._k[..., :self._n, :], self._v[..., :self._n, :]
            return self.keys, self.values

        def reorder_cache(self, beam_idx) -> None:
            if self._n:
                self._k, self._v = self._k.index_select(0, beam_idx), self._v.index_select(0, beam_idx)
                self.keys, self.values = self._k[..., :self._n, :], self._v[..., :self._n, :]

        batch_select_indices = reorder_cache

    return GrowingLayer


def sample(
    model,
    prompts: list[list[int]],
    params: SamplingParams,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None = None,
    share_prefill: bool = True,
) -> SampleBatch:
    """Sample one completion per prompt (repeat prompts for a group), with a KV cache.

    Stops a row at ``eos_id`` (kept in the response, finish_reason ``stop``) or after
    ``params.max_generate_length`` tokens (``length``). ``generator`` makes it reproducible.
    ``share_prefill``: rows with the same prompt run it through the model once, and the rows that share it
    start from copies of its KV cache (a group of n costs one prefill, not n).
    """
    import torch
    from transformers.cache_utils import Cache

    prompt_ids_BP, prompt_mask_BP = left_pad(prompts, pad_id)
    B = len(prompts)
    T = params.max_generate_length
    response_ids_BT = torch.full((B, T), pad_id, dtype=torch.long)
    logprobs_BT = torch.zeros(B, T)
    finish = ["length"] * B
    first_U, inverse_B = distinct_rows(prompts) if share_prefill else (None, None)
    steps = 0
    decoder = lean_decoder(model)
    with torch.inference_mode():
        cache = Cache(layer_class_to_replicate=_growing_layer(T))
        mask_AL = prompt_mask_BP
        if first_U is None:
            out = model(input_ids=prompt_ids_BP, attention_mask=mask_AL, position_ids=position_ids_from_mask(mask_AL),
                        cache=cache, use_cache=True, logits_to_keep=1)
            logits_AV = out.logits[:, -1, :]
        else:  # each distinct prompt prefilled once; its cache and last logits copied to the rows that share it
            out = model(input_ids=prompt_ids_BP[first_U], attention_mask=mask_AL[first_U],
                        position_ids=position_ids_from_mask(mask_AL[first_U]), cache=cache, use_cache=True,
                        logits_to_keep=1)
            cache.reorder_cache(inverse_B)
            logits_AV = out.logits[inverse_B, -1, :]
        # The batch in the model ("active" rows, A of them) drops the rows that finished once enough of them have:
        # a finished row costs a full row of every decode matmul. rows_A: each active row's index in the B rows.
        rows_A = torch.arange(B)
        alive_A = torch.ones(B, dtype=torch.bool)
        next_pos_A = mask_AL.sum(-1)
        for t in range(T):
            uniform_B = torch.rand(B, generator=generator)  # every row's draw for this position, finished or not
            token_A, logprob_A = _draw(logits_AV, params, uniform_B[rows_A])
            token_A = torch.where(alive_A, token_A, torch.full_like(token_A, pad_id))
            response_ids_BT[rows_A, t] = token_A
            logprobs_BT[rows_A, t] = logprob_A.float().masked_fill(~alive_A, 0.0)
            stopped_A = alive_A & (token_A == eos_id)
            for b in rows_A[stopped_A].tolist():
                finish[b] = "stop"
            alive_next_A = alive_A & ~stopped_A
            steps = t + 1
            live = int(alive_next_A.sum())
            if t == T - 1 or live == 0:
                break
            # the token just drawn is real for every row alive when it was drawn
            mask_AL = torch.cat([mask_AL, alive_A.long()[:, None]], dim=-1)
            pos_A, next_pos_A = next_pos_A, next_pos_A + alive_A.long()  # where the token just drawn sits
            if live <= 3 * len(rows_A) // 4:  # compact: a quarter or more of the active rows finished
                keep_A = torch.nonzero(alive_next_A)[:, 0]
                cache.batch_select_indices(keep_A)
                rows_A, mask_AL, pos_A, next_pos_A = rows_A[keep_A], mask_AL[keep_A], pos_A[keep_A], next_pos_A[keep_A]
                token_A, alive_next_A = token_A[keep_A], alive_next_A[keep_A]
            if decoder is not None:
                logits_AV = decoder(token_A, pos_A, mask_AL, cache)
            else:
                out = model(input_ids=token_A[:, None], attention_mask=mask_AL, position_ids=pos_A[:, None],
                            cache=cache, use_cache=True)
                logits_AV = out.logits[:, -1, :]
            alive_A = alive_next_A
    response_ids_BT, logprobs_BT = response_ids_BT[:, :steps], logprobs_BT[:, :steps]
    # a token is part of the response until (and including) the first EOS
    stopped_B = torch.tensor([f == "stop" for f in finish], dtype=torch.bool)
    first_eos_B = (response_ids_BT == eos_id).int().argmax(-1)
    lengths_B = torch.where(stopped_B, first_eos_B + 1, response_ids_BT.shape[1])
    response_mask_BT = (torch.arange(response_ids_BT.shape[1])[None, :] < lengths_B[:, None]).long()
    return SampleBatch(
        prompt_ids_BP=prompt_ids_BP,
        prompt_mask_BP=prompt_mask_BP,
        response_ids_BT=response_ids_BT,
        response_mask_BT=response_mask_BT,
        logprobs_BT=logprobs_BT * response_mask_BT,
        finish_reasons=finish,
    )


class TorchSampler:
    """The torch backend of the generation protocol (:class:`skyrl_engine.protocol.TokenGenerator`).

    Holds its own copy of the policy for sampling; the trainer pushes new weights after each step.

    >>> sampler = TorchSampler(load_model(model_dir), pad_id=tok.pad_token_id)      # doctest: +SKIP
    >>> sampler.generate([[5, 6, 7]], n=4, params=SamplingParams(max_generate_length=8), seed=0,
    ...                  stop_token_ids=[tok.eos_token_id])                          # doctest: +SKIP
    """

    def __init__(self, model: Any, pad_id: int, share_prefill: bool = True) -> None:
        self.model = model
        self.share_prefill = share_prefill  # generator.inference_engine.enable_prefix_caching: see sample()
        self.model.requires_grad_(False)
        self.pad_id = pad_id
        self.version = 0
        self.max_context_tokens: int | None = None  # no hard limit: positions past training extrapolate
        self._lora_base: dict[str, Any] | None = None  # the base weights LoRA adapters merge into
        self.accepts_lora_adapter = True

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams, seed: int,
                 stop_token_ids: Sequence[int] = ()) -> Completions:
        """``n`` completions per prompt with :func:`sample`, drawn from a generator seeded with ``seed``."""
        import torch

        if len(stop_token_ids) != 1:
            raise ValueError(f"stop_token_ids: {list(stop_token_ids)!r}: the torch sampler stops at exactly one "
                             "token id (the tokenizer's EOS)")
        t0 = time.perf_counter()
        batch = sample(self.model, [list(ids) for ids in prompt_ids for _ in range(n)], params,
                       eos_id=int(stop_token_ids[0]), pad_id=self.pad_id,
                       generator=torch.Generator().manual_seed(seed), share_prefill=self.share_prefill)
        lengths = batch.response_lengths_B.tolist()
        ids, logprobs = batch.response_ids_BT.tolist(), batch.logprobs_BT.tolist()  # whole, then cut per row
        return Completions(
            prompt_index=[b // n for b in range(len(lengths))],
            response_ids=[row[:length] for row, length in zip(ids, lengths, strict=True)],
            logprobs=[row[:length] for row, length in zip(logprobs, lengths, strict=True)],
            finish_reasons=batch.finish_reasons,
            policy_version=self.version,
            generate_s=time.perf_counter() - t0,
        )

    def update_weights(self, weights: Mapping[str, Any] | str | LoraAdapter, version: int) -> float:
        """Load a full state dict from the trainer (or a directory of safetensors), or a LoRA adapter, which is
        merged into the base model this sampler started with (:func:`skyrl_engine.lora.apply_adapter`)."""

        t0 = time.perf_counter()
        if isinstance(weights, LoraAdapter):
            self._lora_base = apply_adapter(self.model, weights, self._lora_base)
        elif isinstance(weights, Mapping):
            self.model.load_state_dict(weights, strict=True)
        else:

            self.model.load_state_dict(load_model(str(weights)).state_dict(), strict=True)
        self.version = version
        return time.perf_counter() - t0

    def sleep(self) -> None:
        """Nothing to free on CPU."""

    def wake_up(self) -> None:
        """Nothing to restore on CPU."""

    def shutdown(self) -> None:
        """Nothing runs besides this process."""

    def __repr__(self) -> str:
        return f"TorchSampler({type(self.model).__name__}, version={self.version})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"
