"""DAPO's sampling-side pieces: a step over the generator's output, whatever generates it.

:class:`DynamicSampler` takes the step's ``generate(rows, n, params, seed)`` (the workers' own, any
backend, any loop) and turns it into what DAPO trains on:

1. **Overlong filtering** (``generator.apply_overlong_filtering``): a sample that hit
   ``max_generate_length`` without its EOS keeps its reward (the group's statistics still see it)
   but carries no loss: its loss mask is zero and its run-store row says ``overlong_filtered``.
2. **Soft overlong penalty** (``trainer.algorithm.overlong_buffer.{len,penalty_factor}``), SkyRL's
   DAPO example: with ``L = max_generate_length`` and buffer ``b``, a response of ``l > L - b``
   tokens loses ``(l - (L - b)) / b * penalty_factor`` of reward.
3. **Dynamic sampling** (``trainer.algorithm.dynamic_sampling.type``):

   - ``filter`` (DAPO): drop groups whose rewards do not vary (they give GRPO no signal), sample
     another batch of prompts, and repeat until ``train_batch_size`` groups are kept or
     ``max_sample_batches`` batches were drawn; extra groups past the batch size are dropped too.
   - ``replace`` (POLARIS, SkyRL's ``handle_replace_sampling``): when more than
     ``min_replace_ratio`` of the groups vary, each zero-variance group is replaced by a copy of a
     varying one (the copy keeps its source's group id, so the two form one larger group, as in
     SkyRL); otherwise the batch is drawn again.

   Extra prompt batches come from the training rows through a generator seeded by the step's seed,
   so a resumed run draws the same ones. When ``max_sample_batches`` is reached SkyRL raises; here
   the step trains on what it has (``dynamic_sampling/exhausted`` = 1) so a long run on an easy task
   does not die at its end.

Dropped samples travel in ``GeneratorOutput.discarded`` with their ``discarded_reason``
(``zero_variance``, ``surplus``, ``zero_variance_replaced``, ``resampled``) and land in the step's
trajectory part; the step's metrics gain ``dynamic_sampling/*``. ``reward/avg_raw_reward`` is the
mean over every sample drawn in the step, before filtering (as SkyRL logs it): the kept groups alone
would sit near 0.5 whatever the policy does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from skyrl_core.metric_names import REWARD_KEY

if TYPE_CHECKING:
    from skyrl_core.config import DynamicSamplingConfig, JobConfig, OverlongBufferConfig, SamplingParams
    from skyrl_engine.types import GeneratorOutput, PromptRow

_SEED_MOD = 2**63 - 1


def dapo_enabled(cfg: JobConfig) -> bool:
    """Whether any DAPO sampling feature is switched on in ``cfg``."""
    a = cfg.trainer.algorithm
    return bool(a.dynamic_sampling.type or cfg.generator.apply_overlong_filtering or a.overlong_buffer.len > 0)


# ------------------------------------------------------------------------------------------------
# pure pieces


def soft_overlong_penalty(rewards_B: list[float], lengths_B: list[int], max_len: int, buffer_len: int,
                          penalty_factor: float) -> list[float]:
    """SkyRL's DAPO soft overlong punishment: rewards minus the penalty for entering the last ``buffer_len`` tokens.

    >>> soft_overlong_penalty([1.0, 1.0, 1.0], [4, 7, 8], max_len=8, buffer_len=2, penalty_factor=1.0)
    [1.0, 0.5, 0.0]
    """
    if buffer_len <= 0:
        return list(rewards_B)
    start = max_len - buffer_len
    out = []
    for reward, length in zip(rewards_B, lengths_B, strict=True):
        if start < length <= max_len:
            reward = reward - (length - start) / buffer_len * penalty_factor
        elif length > max_len:
            reward = 0.0
        out.append(float(reward))
    return out


def zero_variance_groups(rewards_B: list[float], group_ids_B: list[int]) -> list[int]:
    """Group ids (in first-seen order) whose members all got the same reward; a group of one always varies."""
    by_group: dict[int, list[float]] = {}
    for reward, gid in zip(rewards_B, group_ids_B, strict=True):
        by_group.setdefault(gid, []).append(reward)
    return [gid for gid, rs in by_group.items() if len(rs) > 1 and max(rs) == min(rs)]


def loss_mask_of(out: GeneratorOutput):
    """The loss mask ``(B, T)`` the policy update uses: ``out.loss_mask_BT`` or the response mask."""
    mask = getattr(out, "loss_mask_BT", None)
    return out.samples.response_mask_BT if mask is None else mask


def _take(value: Any, idx: list[int], batch: int) -> Any:
    import torch

    if isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch:
        return value[torch.tensor(idx, dtype=torch.long)] if idx else value[:0]
    if isinstance(value, list) and len(value) == batch:
        return [value[i] for i in idx]
    return value


def select(out: GeneratorOutput, idx: list[int]) -> GeneratorOutput:
    """The samples ``idx`` of ``out`` (in that order; repeats allowed), every per-sample field alike."""
    batch = len(out.rewards_B)
    samples = out.samples
    new_samples = dataclasses.replace(
        samples, **{f.name: _take(getattr(samples, f.name), idx, batch) for f in dataclasses.fields(samples)}
    )
    fields = {f.name: _take(getattr(out, f.name), idx, batch) for f in dataclasses.fields(out)
              if f.name not in ("samples", "discarded", "metrics")}
    return dataclasses.replace(out, samples=new_samples, **fields)


def _pad_cat(tensors: list, left: bool):
    """Concatenate ``(B_i, W_i)`` tensors along rows, padding with zeros to the widest (left or right)."""
    import torch

    width = max(t.shape[1] for t in tensors)
    parts = []
    for t in tensors:
        pad = torch.zeros((t.shape[0], width - t.shape[1]), dtype=t.dtype)
        parts.append(torch.cat([pad, t] if left else [t, pad], dim=1))
    return torch.cat(parts, dim=0)


def _cat_field(name: str, values: list[Any]) -> Any:
    import torch

    if all(v is None for v in values):
        return None
    if isinstance(values[0], torch.Tensor):
        return _pad_cat(values, left=name.endswith("_BP"))
    if isinstance(values[0], list):
        return [x for v in values for x in v]
    return values[0]


def concat(outs: list[GeneratorOutput]) -> GeneratorOutput:
    """One output holding every sample of ``outs`` (prompts re-left-padded, responses re-right-padded).

    ``loss_mask_BT`` and ``sample_columns`` are filled in for outputs that lack them, so mixing is safe.
    """
    outs = [o for o in outs if len(o.rewards_B)]
    if len(outs) == 1:
        return outs[0]
    if any(o.loss_mask_BT is not None for o in outs):
        outs = [dataclasses.replace(o, loss_mask_BT=loss_mask_of(o)) for o in outs]
    if any(o.sample_columns is not None for o in outs):
        outs = [o if o.sample_columns is not None else dataclasses.replace(o, sample_columns=[{} for _ in o.rewards_B])
                for o in outs]
    samples = dataclasses.replace(
        outs[0].samples,
        **{f.name: _cat_field(f.name, [getattr(o.samples, f.name) for o in outs])
           for f in dataclasses.fields(outs[0].samples)},
    )
    fields = {f.name: _cat_field(f.name, [getattr(o, f.name) for o in outs]) for f in dataclasses.fields(outs[0])
              if f.name not in ("samples", "discarded", "metrics", "group_size")}
    return dataclasses.replace(outs[0], samples=samples, discarded=None, metrics={}, **fields)


def with_reason(out: GeneratorOutput, reason: str) -> GeneratorOutput:
    """``out`` with ``discarded_reason`` set on every sample (merged into its ``sample_columns``)."""
    columns = out.sample_columns or [{} for _ in out.rewards_B]
    return dataclasses.replace(out, sample_columns=[{**c, "discarded_reason": reason} for c in columns])


def _group_indices(group_ids_B: list[int]) -> dict[int, list[int]]:
    by_group: dict[int, list[int]] = {}
    for b, gid in enumerate(group_ids_B):
        by_group.setdefault(gid, []).append(b)
    return by_group


def _split(out: GeneratorOutput, keep_groups: list[int]) -> tuple[list[int], list[int]]:
    keep = set(keep_groups)
    kept = [b for b, g in enumerate(out.group_ids_B) if g in keep]
    dropped = [b for b, g in enumerate(out.group_ids_B) if g not in keep]
    return kept, dropped


# ------------------------------------------------------------------------------------------------
# the step


Generate = Callable[[list["PromptRow"], int, "SamplingParams", int], "GeneratorOutput"]


class DynamicSampler:
    """Overlong filtering, the soft overlong penalty and dynamic sampling around one step's ``generate``.

    >>> dapo = DynamicSampler.from_config(cfg, train_rows)                     # doctest: +SKIP
    >>> out = dapo.sample(workers.generate, rows, n, params, seed)            # doctest: +SKIP
    """

    def __init__(self, dynamic_sampling: DynamicSamplingConfig, overlong_buffer: OverlongBufferConfig,
                 apply_overlong_filtering: bool, train_rows: list[PromptRow]):
        self.train_rows = train_rows
        self.sampling_type = dynamic_sampling.type
        self.max_sample_batches = int(dynamic_sampling.max_sample_batches)
        self.min_replace_ratio = float(dynamic_sampling.min_replace_ratio)
        self.buffer_len = int(overlong_buffer.len)
        self.penalty_factor = float(overlong_buffer.penalty_factor)
        self.overlong_filtering = bool(apply_overlong_filtering)

    @classmethod
    def from_config(cls, cfg: JobConfig, train_rows: list[PromptRow]) -> DynamicSampler | None:
        """The sampler ``cfg`` asks for, or None when no DAPO sampling feature is on."""
        if not dapo_enabled(cfg):
            return None
        a = cfg.trainer.algorithm
        return cls(a.dynamic_sampling, a.overlong_buffer, cfg.generator.apply_overlong_filtering, train_rows)

    def __repr__(self) -> str:
        return (f"DynamicSampler(dynamic_sampling={self.sampling_type!r}, max_sample_batches={self.max_sample_batches}, "
                f"overlong_filtering={self.overlong_filtering}, overlong_buffer={self.buffer_len})")

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"

    # -- one sampled batch ------------------------------------------------------------------------
    def _postprocess(self, out: GeneratorOutput, params: SamplingParams) -> tuple[GeneratorOutput, int]:
        """Overlong filtering and the soft penalty on one batch; returns ``(out, samples_filtered)``."""
        import torch

        filtered = 0
        if self.overlong_filtering:
            stopped_B = torch.tensor([f == "stop" for f in out.samples.finish_reasons], dtype=torch.bool)
            filtered = int((~stopped_B).sum())
            if filtered:
                mask = loss_mask_of(out) * stopped_B[:, None].to(out.samples.response_mask_BT.dtype)
                columns = out.sample_columns or [{} for _ in out.rewards_B]
                columns = [c if s else {**c, "discarded_reason": "overlong_filtered"}
                           for c, s in zip(columns, stopped_B.tolist(), strict=True)]
                out = dataclasses.replace(out, loss_mask_BT=mask, sample_columns=columns)
        if self.buffer_len > 0:
            lengths = out.samples.response_mask_BT.sum(-1).tolist()
            rewards = soft_overlong_penalty(out.rewards_B, lengths, params.max_generate_length,
                                            self.buffer_len, self.penalty_factor)
            out = dataclasses.replace(out, rewards_B=rewards)
        return out, filtered

    def _sample_batch(self, generate: Generate, k: int, rows: list[PromptRow], n: int, params: SamplingParams,
                      seed: int):
        """Batch ``k`` of the step: the trainer's rows first, then rows drawn from the training set."""
        import numpy as np

        if k > 0:
            rng = np.random.default_rng([seed % _SEED_MOD, k])
            picked = rng.choice(len(self.train_rows), size=min(len(rows), len(self.train_rows)), replace=False)
            rows = [self.train_rows[i] for i in picked.tolist()]
        out = generate(rows, n, params, (seed + k * 1_000_003) % _SEED_MOD)
        offset = k * len(rows)
        if offset:
            out = dataclasses.replace(out, group_ids_B=[g + offset for g in out.group_ids_B])
        return out

    # -- the step -----------------------------------------------------------------------------------
    def sample(self, generate: Generate, rows: list[PromptRow], n: int, params: SamplingParams,
               seed: int) -> GeneratorOutput:
        """DAPO's rollouts for one step from ``generate`` (see the module docstring); dropped samples in
        ``out.discarded``."""
        target = len(rows)
        batches = 0
        all_rewards: list[float] = []
        overlong = 0
        kept: list[GeneratorOutput] = []
        discarded: list[GeneratorOutput] = []
        groups_filtered = groups_replaced = 0
        exhausted = False
        final: GeneratorOutput | None = None
        while True:
            out, filtered = self._postprocess(self._sample_batch(generate, batches, rows, n, params, seed), params)
            batches += 1
            overlong += filtered
            all_rewards.extend(out.rewards_B)
            last_try = self.max_sample_batches > 0 and batches >= self.max_sample_batches
            if self.sampling_type is None:
                final = out
                break
            flat = zero_variance_groups(out.rewards_B, out.group_ids_B)
            if self.sampling_type == "replace":
                groups = list(_group_indices(out.group_ids_B))
                good = [g for g in groups if g not in set(flat)]
                if len(good) > len(groups) * self.min_replace_ratio:
                    final, dropped = self._replace(out, flat, good, seed)
                    groups_replaced = len(flat)
                    if dropped is not None:
                        discarded.append(dropped)
                    break
                if last_try:
                    final, exhausted = out, True
                    break
                discarded.append(with_reason(out, "resampled"))
                continue
            # filter
            groups_filtered += len(flat)
            keep_idx, drop_idx = _split(out, [g for g in _group_indices(out.group_ids_B) if g not in set(flat)])
            if drop_idx:
                discarded.append(with_reason(select(out, drop_idx), "zero_variance"))
            if keep_idx:
                kept.append(select(out, keep_idx))
            have = sum(len(set(o.group_ids_B)) for o in kept)
            if have >= target or last_try:
                exhausted = have < target
                final = self._truncate(kept, target, n, discarded) if kept else None
                break
        if final is None:  # nothing varied in any batch: train on the first (its advantages are zero)
            first = discarded.pop(0)
            final = dataclasses.replace(first, sample_columns=[
                {k: v for k, v in c.items() if k != "discarded_reason"} for c in (first.sample_columns or [])
            ] or None)
        metrics = {
            REWARD_KEY: sum(all_rewards) / max(1, len(all_rewards)),
            "dynamic_sampling/sample_batches": float(batches),
            "dynamic_sampling/groups_filtered": float(groups_filtered),
            "dynamic_sampling/groups_replaced": float(groups_replaced),
            "dynamic_sampling/groups_kept": float(len(set(final.group_ids_B))),
            "dynamic_sampling/exhausted": float(exhausted),
            "generate/overlong_filtered": float(overlong),
        }
        return dataclasses.replace(
            final,
            discarded=concat(discarded) if discarded else None,
            metrics={**(final.metrics or {}), **metrics},
        )

    def _truncate(self, kept: list[GeneratorOutput], target: int, n: int, discarded: list[GeneratorOutput]):
        out = concat(kept)
        groups = list(_group_indices(out.group_ids_B))
        if len(groups) <= target:
            return out
        keep_idx, drop_idx = _split(out, groups[:target])
        discarded.append(with_reason(select(out, drop_idx), "surplus"))
        return select(out, keep_idx)

    def _replace(self, out: GeneratorOutput, flat: list[int], good: list[int], seed: int):
        """SkyRL's replace: each flat group's samples become copies of a randomly chosen varying group."""
        import numpy as np

        if not flat:
            return out, None
        by_group = _group_indices(out.group_ids_B)
        rng = np.random.default_rng([seed % _SEED_MOD, 7])
        if len(good) >= len(flat):
            sources = [good[i] for i in rng.permutation(len(good))[: len(flat)].tolist()]
        else:
            sources = [good[i] for i in rng.integers(0, len(good), size=len(flat)).tolist()]
        source_of = list(range(len(out.rewards_B)))
        for bad, src in zip(flat, sources, strict=True):
            for bad_idx, src_idx in zip(by_group[bad], by_group[src], strict=False):
                source_of[bad_idx] = src_idx
        bad_idx = [b for g in flat for b in by_group[g]]
        dropped = with_reason(select(out, bad_idx), "zero_variance_replaced")
        return select(out, source_of), dropped
