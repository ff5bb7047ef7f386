"""The critic for ``advantage_estimator=gae``: a value model, its update, its checkpoint.

A step with a critic (SkyRL's ``fwd_logprobs_values_reward`` + ``train_critic_and_policy``)::

    values_BT  = critic(sequences)            per response token, zero after the response ends
    advantages_BT, returns_BT = gae(rewards_BT, values_BT)         (algorithms.py)
    for each of update_epochs_per_batch:
        for each mini-batch (critic_mini_batch_size prompts x n samples):
            for each micro-batch (micro_train_batch_size_per_gpu samples):
                loss = compute_value_loss(V, V_old, R, trainer.algorithm.value_clip)
            clip grads to max_grad_norm; optimizer.step(); scheduler.step()
    then the policy update with those advantages

The value model is a causal LM's transformer body with a linear head (SkyRL's ``CriticModel``):
``trainer.critic.model.path`` None means a copy of the policy's weights. ``V_t`` is the head's
output at the position *before* response token t, the same alignment as the policy's log-probs.

:class:`CriticWorker` is the critic role of :class:`skyrl_engine.workers.Workers` (in-process or a Ray actor).
Its checkpoint is ``global_step_N/critic/`` next to ``policy/``, in the same layout (trainable.py).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from skyrl_engine import algorithms
from skyrl_engine.models import load_model
from skyrl_engine.policy import prepare_worker
from skyrl_engine.sampler import position_ids_from_mask
from skyrl_engine.trainable import TrainableWorker, forward_rows, updates_per_step

if TYPE_CHECKING:
    import torch

    from skyrl_core.config import JobConfig, TrainerConfig
    from skyrl_engine.types import TrainBatch

CRITIC_DIR = "critic"
VALUE_HEAD_INIT_SEED_OFFSET = 7919  # the head's init is seeded from trainer.seed, apart from other streams


def needs_critic(cfg: JobConfig) -> bool:
    """True when the config's advantage estimator uses critic values (``gae``)."""
    from skyrl_core.choices import AdvantageEstimator

    return cfg.trainer.algorithm.advantage_estimator == AdvantageEstimator.GAE


def critic_model_path(cfg: JobConfig, policy_model_path: str) -> str:
    """``trainer.critic.model.path``, or the policy's (resolved) directory when it is None or the same."""
    path = cfg.trainer.critic.model.path
    if not path or path == cfg.trainer.policy.model.path:  # e.g. both builtin://tiny-qwen2
        return policy_model_path
    return os.path.expanduser(path)


def build_value_model(model_path: str, seed: int):
    """A value model: the transformer body of the causal LM at ``model_path`` plus ``value_head``.

    The head is ``Linear(hidden, 1, bias=False)`` with N(0, 1/(hidden+1)) weights drawn from
    ``seed`` (SkyRL's ``init_value_head``), so two runs with one seed start from the same critic.
    """
    import torch


    class ValueModel(torch.nn.Module):
        """``body`` (the LM's transformer) + ``value_head``; its forward is the one FSDP2's hooks wrap."""

        def __init__(self, body: torch.nn.Module, hidden: int) -> None:
            super().__init__()
            self.body = body
            self.value_head = torch.nn.Linear(hidden, 1, bias=False)

        def forward(self, input_ids, attention_mask, position_ids):
            out = self.body(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                            use_cache=False)
            return self.value_head(out.last_hidden_state).squeeze(-1)

    lm = load_model(model_path)
    hidden = int(lm.config.hidden_size)
    model = ValueModel(getattr(lm, lm.base_model_prefix), hidden)
    generator = torch.Generator().manual_seed(seed + VALUE_HEAD_INIT_SEED_OFFSET)
    with torch.no_grad():
        model.value_head.weight.normal_(0.0, 1.0 / (hidden + 1), generator=generator)
    return model


def response_values(model, batch: TrainBatch) -> torch.Tensor:
    """``values_BT``: the value head at the positions that predict each response token."""

    P = batch.num_prompt_tokens
    values_BL = model(batch.sequences_BL, batch.attention_mask_BL, position_ids_from_mask(batch.attention_mask_BL))
    return values_BL[:, P - 1 : -1].float()


class CriticWorker(TrainableWorker):
    """Value model + AdamW + LR schedule (``trainer.critic.optimizer_config``); one rank of the critic role
    (:class:`skyrl_engine.trainable.TrainableWorker`)."""

    role = CRITIC_DIR
    missing_hint = "; was it written by a run without advantage_estimator=gae?"

    def __init__(self, model_path: str, trainer: TrainerConfig, total_steps: int, num_threads: int = 0,
                 plugins: list[str] | tuple[str, ...] = (), rank: int = 0, world_size: int = 1):

        self.num_threads = prepare_worker(num_threads, plugins)
        t = self.trainer = trainer
        self.model = build_value_model(model_path, int(t.seed))
        self.model.train()
        self._setup(t.critic.optimizer_config, t.critic.fsdp_config,
                    total_steps * updates_per_step(t, t.critic_mini_batch_size), rank, world_size)

    def compute_values(self, batch: TrainBatch) -> torch.Tensor:
        """``values_BT`` of the batch before any update (micro-batched, no grad), zero off the response."""

        return self.forward_rows_no_grad(batch, forward_rows(self.trainer), response_values)

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """Fit ``batch.returns_BT`` with the clipped value loss; return SkyRL's ``critic/...`` metrics.

        ``batch.values_BT`` (from :meth:`compute_values`) are the old values the clip is around. With
        several ranks each fits its slice of every mini-batch (see TrainableWorker).
        """

        if batch.values_BT is None or batch.returns_BT is None:
            raise ValueError("CriticWorker.train_step needs batch.values_BT and batch.returns_BT (set by build_train_batch)")
        t = self.trainer
        value_clip = t.algorithm.value_clip
        B = batch.sequences_BL.shape[0]
        mini_rows = min(t.critic_mini_batch_size * batch.group_size, B)
        micro_rows = min(t.micro_train_batch_size_per_gpu, mini_rows)
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}

        def add(key: str, value: float | None) -> None:
            if value is not None:
                sums[key] = sums.get(key, 0.0) + float(value)
                counts[key] = counts.get(key, 0) + 1

        self.model.train()
        for _epoch in range(t.update_epochs_per_batch):
            for mini_start in range(0, B, mini_rows):
                mini_B = min(mini_rows, B - mini_start)
                self.optimizer.zero_grad(set_to_none=True)
                mini_loss = 0.0
                first, last = self.my_rows(mini_B)
                for micro_start in range(first, last, micro_rows):
                    lo, hi = mini_start + micro_start, mini_start + min(micro_start + micro_rows, last)
                    micro = batch.rows(lo, hi)
                    mask_BT = micro.response_mask_BT.float()
                    values_BT = response_values(self.model, micro)
                    loss, clipfrac = algorithms.compute_value_loss(
                        values_BT, micro.values_BT, micro.returns_BT, mask_BT, value_clip
                    )
                    # the loss is a mean over rows: each micro-batch carries its share of the mini-batch
                    self.backward(loss * ((hi - lo) / mini_B))
                    mini_loss += loss.item() * (hi - lo) / mini_B
                    add("values_mean", algorithms.masked_mean(values_BT.detach(), mask_BT).item())
                    add("values_clipfrac", clipfrac)
                add("critic_loss", mini_loss)
                add("grad_norm", self.clip_grad_norm(t.critic.optimizer_config.max_grad_norm))
                add("critic_lr", self.scheduler.get_last_lr()[0])
                self.optimizer.step()
                self.scheduler.step()
        return self.finish_metrics({f"critic/{k}": sums[k] / counts[k] for k in sums}, summed=("critic/critic_loss",))

    # -- state ----------------------------------------------------------------------------------
    def _write_weights(self, role_dir: str, weights: dict[str, Any]) -> None:
        """``model.safetensors``: the body and the value head."""
        from safetensors.torch import save_file

        # clone: tied or shared tensors would make safetensors refuse the file
        save_file({k: v.detach().clone().contiguous() for k, v in weights.items()},
                  os.path.join(role_dir, "model.safetensors"))
