"""The policy side of a step: forward passes, the loss, micro-batched optimizer steps.

``PolicyWorker`` holds the policy, the optimizer and the LR schedule; ``ReferenceWorker`` the frozen
reference that ``use_kl_loss`` compares with (its log-probs arrive in ``TrainBatch.ref_logprobs_BT``).
Each is a role of :class:`skyrl_engine.workers.Workers`, in the job's process or a Ray actor. One call
of :meth:`PolicyWorker.train_step` does SkyRL's ``train_critic_and_policy`` for the policy:

    for each of update_epochs_per_batch:
        for each mini-batch (policy_mini_batch_size prompts x n samples):
            for each micro-batch (micro_train_batch_size_per_gpu samples):
                loss = policy_loss(registry) [+ kl_loss_coef * KL(ref)] [- entropy_loss_coef * H]
                    (policy_loss weighed by off_policy_correction when set: TIS with
                     exp(old - rollout log-probs), for rollouts from an older policy or vLLM)
                backward (each micro-batch its share of the mini-batch loss)
            clip grads to max_grad_norm; optimizer.step(); scheduler.step()
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from skyrl_engine import algorithms, lora, lora_forward
from skyrl_engine.head import frozen_head, frozen_head_logprobs, trained_head, trained_head_logprobs
from skyrl_engine.lora import (
    adapter_of,
    has_adapter,
    install_adapter,
    merged_state_dict,
    parameter_counts,
    read_adapter,
    save_adapter,
)
from skyrl_engine.models import copy_tokenizer_files, load_model
from skyrl_engine.packed import packed_forward
from skyrl_engine.ray_runtime import register_tensor_transport
from skyrl_engine.sampler import distinct_rows, position_ids_from_mask
from skyrl_engine.trainable import TrainableWorker, forward_no_grad, forward_rows, updates_per_step
from skyrl_engine.types import TrainBatch

if TYPE_CHECKING:

    from skyrl_core.config import TrainerConfig


def single_pass(trainer: Any, samples: int, group_size: int) -> bool:
    """Whether a step's update over ``samples`` samples (groups of ``group_size``) is one pass (one epoch, one
    mini-batch): then the loss's old log-probs are the current ones detached and no extra forward pass is needed."""
    return trainer.update_epochs_per_batch == 1 and trainer.policy_mini_batch_size * group_size >= samples


def set_torch_threads(num_threads: int) -> int:
    """Fix torch's intra-op threads (0 = all cores this process may use); return the count.

    Ray gives actors one thread by default, and bit-exact resume needs the same count every run.
    """
    import torch

    if num_threads <= 0:
        num_threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(num_threads)
    return num_threads


#: glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (``mallopt``) for a process that trains: see :func:`keep_freed_memory`
MALLOC_SETTINGS = ((-3, 32 << 20), (-1, 1 << 30))


def keep_freed_memory() -> bool:
    """Have glibc keep the memory a step frees for the next step; returns whether it applied (glibc only).

    A step allocates and frees the same activation and gradient buffers every time. By default glibc serves a
    block over 128 KiB (a threshold it moves as blocks are freed) with a fresh ``mmap`` and gives the heap's free
    top back to the kernel, so each step faults its buffers in again, page by page. Blocks up to 32 MiB (glibc's
    ceiling for this setting) now come from the heap, which keeps up to 1 GiB of free top: the tiny model's
    training step went from 26.2 to 23.9 ms (medians of 3 alternating runs of 400 steps). What a process holds
    stays at the high-water mark of its steps, which it reaches anyway.
    """
    import ctypes

    try:  # glibc names itself here; musl, macOS and Windows do not
        libc = ctypes.CDLL("libc.so.6") if os.confstr("CS_GNU_LIBC_VERSION") else None
    except (AttributeError, ValueError, OSError):
        libc = None
    if libc is None:
        return False
    return all(libc.mallopt(option, value) == 1 for option, value in MALLOC_SETTINGS)


def response_logprobs(model, batch: TrainBatch, temperature: float, with_entropy: bool = False,
                      share_prompt: bool = True, entropy_grad: bool = False):
    """``(logprobs_BT, entropy_BT)``: the response tokens' log-probs under ``softmax(logits / temperature)`` and, with
    ``with_entropy``, that distribution's entropy at each position (else None; with ``entropy_grad`` it carries a
    gradient, for ``use_entropy_loss``).

    Same layout and positions as the sampler, so on-policy log-probs match the rollout's. Only the positions
    that predict a response token go through the output layer. ``share_prompt``: rows with the same prompt
    (a group's n samples) run it through the model once and their responses continue from its keys and values,
    with gradients flowing back into the shared prompt pass; the values are those of the full per-row pass to float
    rounding (``trainer.share_prompt_prefix``). Llama-family models run over the real tokens only
    (:mod:`skyrl_engine.packed`): positions past a row's response then hold 0; other models take the padded pass
    (:func:`response_logits`).
    """
    import torch

    P = batch.num_prompt_tokens
    B, T = batch.sequences_BL.shape[0], batch.sequences_BL.shape[1] - P
    packed = packed_forward(model)
    head, fused = None, None
    if packed is not None and not (with_entropy and entropy_grad):  # the output layer fused with the log-softmax
        head, fused = frozen_head(packed.base), frozen_head_logprobs
        # not under DDP, whose reducer counts on the forward's use of the parameters
        if head is None and not isinstance(model, torch.nn.parallel.DistributedDataParallel):
            positions = int(batch.attention_mask_BL[:, P:].sum())  # one logit row per response token
            head, fused = trained_head(packed.base, positions), trained_head_logprobs
    found = (packed.logits(batch.sequences_BL, batch.attention_mask_BL, P, share_prompt, hidden=head is not None)
             if packed is not None else None)
    if found is not None and head is not None:  # skyrl_engine.head
        hidden_MH, b_M, t_M = found
        logprobs_M, entropy_M = fused(hidden_MH, head.weight, batch.sequences_BL[b_M, P + t_M], temperature)
    else:
        if found is not None:
            logits_MV, b_M, t_M = found
            logits_MV = logits_MV.float()
        else:
            on = batch.sequences_BL.device
            b_M, t_M = (torch.arange(B, device=on).repeat_interleave(T), torch.arange(T, device=on).repeat(B))
            logits_MV = response_logits(model, batch, share_prompt).float().reshape(B * T, -1)
        if temperature > 0 and temperature != 1.0:
            logits_MV = logits_MV / temperature
        logp_MV = torch.log_softmax(logits_MV, dim=-1)
        logprobs_M = logp_MV.gather(-1, batch.sequences_BL[b_M, P + t_M][:, None])[:, 0]
        entropy_M = None
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropy_M = -(logp_MV.exp() * logp_MV).sum(dim=-1)  # algorithms.compute_entropy, same log-softmax
    logprobs_BT = logprobs_M.new_zeros(B, T).index_put((b_M, t_M), logprobs_M)
    return logprobs_BT, (entropy_M.new_zeros(B, T).index_put((b_M, t_M), entropy_M) if with_entropy else None)


def response_logits(model, batch: TrainBatch, share_prompt: bool = True):
    """``logits_BTV``: the model's logits at positions ``P-1 .. L-2``, each predicting the response token after it
    (see :func:`response_logprobs`)."""
    import torch
    from transformers import DynamicCache


    P = batch.num_prompt_tokens
    T = batch.sequences_BL.shape[1] - P
    ids_BL, mask_BL = batch.sequences_BL, batch.attention_mask_BL
    pos_BL = position_ids_from_mask(mask_BL)
    first_U, inverse_B = (distinct_rows(torch.cat([ids_BL[:, :P], mask_BL[:, :P]], dim=-1).tolist())
                          if share_prompt else (None, None))
    if first_U is None:
        out = model(input_ids=ids_BL, attention_mask=mask_BL, position_ids=pos_BL, use_cache=False,
                    logits_to_keep=T + 1)
        return out.logits[:, :-1, :]
    cache = DynamicCache()
    head = model(input_ids=ids_BL[first_U, :P], attention_mask=mask_BL[first_U, :P], position_ids=pos_BL[first_U, :P],
                 cache=cache, use_cache=True, logits_to_keep=1)
    cache.reorder_cache(inverse_B)  # index_select: each row's gradient flows back to its prompt's pass
    tail = model(input_ids=ids_BL[:, P:], attention_mask=mask_BL, position_ids=pos_BL[:, P:], cache=cache,
                 use_cache=True)
    return torch.cat([head.logits[inverse_B], tail.logits[:, :-1, :]], dim=1)


def prepare_worker(num_threads: int, plugins: list[str] | tuple[str, ...] = ()) -> int:
    """What every worker does first: import the job's ``plugins:`` (their registrations live per process),
    fix torch's threads, keep freed memory for the next step, turn deterministic algorithms on. Returns the thread count."""
    import torch

    from skyrl_core.registry import load_plugins

    load_plugins(plugins)
    threads = set_torch_threads(num_threads)
    keep_freed_memory()
    torch.use_deterministic_algorithms(True, warn_only=True)
    # not its NaN-filling of every fresh tensor, a check for reads of memory never written (none here: the quickstart
    # fixture is the same bit for bit), about 0.3 s of a 12 s one-thread SmolLM2 full fine-tuning step (3 A/B rounds)
    torch.utils.deterministic.fill_uninitialized_memory = False
    register_tensor_transport()  # an actor's results (rollouts, weights) leave it through Ray
    return threads


class ReferenceWorker:
    """The frozen reference policy of ``use_kl_loss``: its log-probs of each step's responses."""

    def __init__(self, model_path: str, trainer: TrainerConfig, temperature: float, num_threads: int = 0,
                 plugins: list[str] | tuple[str, ...] = ()) -> None:

        self.num_threads = prepare_worker(num_threads, plugins)
        self.micro_rows = forward_rows(trainer)
        self.share_prompt = trainer.share_prompt_prefix
        self.temperature = float(temperature) or 1.0
        self.model = load_model(model_path)
        self.model.requires_grad_(False)

    def logprobs(self, batch: TrainBatch) -> Any:
        """``ref_logprobs_BT`` of the batch's response tokens."""
        return forward_no_grad(self.model, batch, self.micro_rows,
                               lambda model, micro: response_logprobs(model, micro, self.temperature,
                                                                      share_prompt=self.share_prompt)[0])

    def ping(self) -> int:
        """The torch thread count (also proves the actor is up)."""
        return self.num_threads


class PolicyWorker(TrainableWorker):
    """Policy + AdamW + LR schedule; one :meth:`train_step` per step. One rank of the policy role
    (:class:`skyrl_engine.trainable.TrainableWorker`: the group, the passes split across ranks, checkpoints).

    ``trainer`` is the config's ``trainer`` section; ``temperature`` the generator's sampling
    temperature (the log-probs are taken under the same tempered softmax the sampler drew from).
    With ``trainer.policy.model.lora.rank > 0`` the model is a PEFT model and only its adapters train
    (:mod:`skyrl_engine.lora`).
    """

    role = "policy"

    def __init__(self, model_path: str, trainer: TrainerConfig, temperature: float, total_steps: int,
                 num_threads: int = 0, plugins: list[str] | tuple[str, ...] = (), rank: int = 0,
                 world_size: int = 1):

        self.num_threads = prepare_worker(num_threads, plugins)
        t = self.trainer = trainer
        self.algo = t.algorithm
        self.temperature = float(temperature) or 1.0
        self.model_path = model_path
        self.lora = t.policy.model.lora if lora.enabled(t.policy.model.lora) else None
        self.model = load_model(model_path)
        self.base_precision = "fp32"  # the frozen base matmuls' (trainer.lora_base_precision, resolved)
        if self.lora is not None:
            self.model = lora.wrap(self.model, self.lora, int(t.seed))
            device = next(self.model.parameters()).device.type
            self.base_precision = lora_forward.base_precision(str(t.lora_base_precision), device)
            lora_forward.set_base_precision(self.model, self.base_precision)
            if str(t.lora_base_precision) == "auto":
                print(f"[skyrl_engine] trainer.lora_base_precision=auto: {self.base_precision}", flush=True)
        self.model.train()
        self._setup(t.policy.optimizer_config, t.policy.fsdp_config,
                    total_steps * updates_per_step(t, t.policy_mini_batch_size), rank, world_size)

    # -- the update ---------------------------------------------------------------------------
    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        """Run the micro-batched update on one step's batch; return ``policy/...`` metrics."""
        t = self.trainer
        algo = self.algo
        B = batch.sequences_BL.shape[0]
        mini_rows = t.policy_mini_batch_size * batch.group_size
        micro_rows = min(t.micro_train_batch_size_per_gpu, mini_rows)
        one_pass = single_pass(t, B, batch.group_size)
        # Off the first pass the policy moves, so the loss needs the pre-update log-probs; on a
        # single pass they equal the current ones (detached), which saves a forward pass. They are
        # also the "old" side of off_policy_correction's ratio exp(old - rollout).
        old_logprobs_BT = None if one_pass else self._forward_no_grad(self.model, batch)
        ref_logprobs_BT = batch.ref_logprobs_BT  # the reference role's, when use_kl_loss
        if algo.use_kl_loss and ref_logprobs_BT is None:
            raise ValueError("trainer.algorithm.use_kl_loss: true, but the batch has no reference log-probs "
                             "(the workers have no reference role)")

        sums: dict[str, float] = {}
        counts: dict[str, int] = {}

        def add(key: str, value: float) -> None:
            sums[key] = sums.get(key, 0.0) + float(value)
            counts[key] = counts.get(key, 0) + 1

        def add_max(key: str, value: float) -> None:
            sums[key] = max(sums.get(key, float("-inf")), float(value))
            counts[key] = 1

        self.model.train()
        for epoch in range(t.update_epochs_per_batch):
            for mini_start in range(0, B, mini_rows):
                mini = batch.rows(mini_start, mini_start + mini_rows)
                mini_B = mini.sequences_BL.shape[0]
                mini_tokens = float(mini.response_mask_BT.sum())
                self.optimizer.zero_grad(set_to_none=True)
                mini_policy_loss = mini_final_loss = 0.0
                # this rank's rows of the mini-batch (all of them for one worker); the loss keeps the
                # whole mini-batch's normalisation and the ranks' gradients are summed
                first, last = self.my_rows(mini_B)
                for micro_start in range(first, last, micro_rows):
                    lo, hi = mini_start + micro_start, mini_start + min(micro_start + micro_rows, last)
                    micro = batch.rows(lo, hi).trimmed()
                    T = micro.response_mask_BT.shape[1]
                    mask_BT = micro.response_mask_BT.float()
                    logprobs_BT, entropy_BT = response_logprobs(self.model, micro, self.temperature, with_entropy=True,
                                                                share_prompt=t.share_prompt_prefix,
                                                                entropy_grad=algo.use_entropy_loss)
                    if epoch == 0 and mini_start == 0:
                        # Before this batch's first optimizer step the weights are the ones the
                        # generator was synced with (one step older in async runs): how far the
                        # engine's log-probs for its own tokens are from the trainer's.
                        gap_BT = (logprobs_BT.detach() - micro.rollout_logprobs_BT).abs() * mask_BT
                        add_max("policy/rollout_train_logprobs_abs_diff_max", gap_BT.max().item())
                        add("policy/rollout_train_logprobs_abs_diff_mean", algorithms.masked_mean(gap_BT, mask_BT).item())
                    old_BT = logprobs_BT.detach() if old_logprobs_BT is None else old_logprobs_BT[lo:hi, :T]
                    policy_loss, loss_metrics = algorithms.compute_policy_loss(
                        algo.policy_loss_type,
                        logprobs_BT,
                        old_BT,
                        micro.advantages_BT,
                        mask_BT,
                        algo,
                        rollout_logprobs=micro.rollout_logprobs_BT,
                        num_sequences=mini_B,
                        num_tokens=mini_tokens,
                    )
                    share = (hi - lo) / mini_B  # KL and entropy are means: weight by rows
                    entropy = algorithms.masked_mean(entropy_BT, mask_BT)
                    loss = policy_loss
                    if algo.use_entropy_loss:
                        loss = loss - algo.entropy_loss_coef * entropy * share
                    if ref_logprobs_BT is not None:
                        kl = algorithms.compute_kl_loss(logprobs_BT, ref_logprobs_BT[lo:hi, :T], mask_BT, algo)
                        loss = loss + algo.kl_loss_coef * kl * share
                    else:
                        # no reference: report how far the update moved from the sampling policy
                        kl = algorithms.masked_mean(micro.rollout_logprobs_BT - logprobs_BT.detach(), mask_BT)
                    self.backward(loss)
                    mini_policy_loss += policy_loss.item()
                    mini_final_loss += loss.item()
                    add("policy/policy_entropy", entropy.item())
                    add("policy/policy_kl", kl.item())
                    for k, v in loss_metrics.items():
                        add(f"policy/loss_metrics/{k}", float(v))
                grad_norm = self.clip_grad_norm(t.policy.optimizer_config.max_grad_norm)
                add("policy/policy_loss", mini_policy_loss)
                add("policy/final_loss", mini_final_loss)
                add("policy/grad_norm", float(grad_norm))
                add("policy/lr", self.scheduler.get_last_lr()[0])
                self.optimizer.step()
                self.scheduler.step()
        return self.finish_metrics({k: sums[k] / counts[k] for k in sums},
                                   summed=("policy/policy_loss", "policy/final_loss"))

    def _forward_no_grad(self, model, batch: TrainBatch):
        return self.forward_rows_no_grad(batch, forward_rows(self.trainer),
                                         lambda model, micro: response_logprobs(
                                             model, micro, self.temperature, share_prompt=self.trainer.share_prompt_prefix)[0])

    # -- weights and state --------------------------------------------------------------------
    def get_weights(self, adapter_only: bool = False) -> Any:
        """The policy's weights for the generator (CPU tensors, detached copies): the state dict (LoRA merged),
        or with ``adapter_only`` and LoRA just the adapters (a :class:`skyrl_engine.lora.LoraAdapter`, which
        the torch generator merges itself). With several ranks every rank must call it and rank 0 returns
        the gathered whole ({} on the others)."""
        if self.lora is not None and adapter_only:

            return adapter_of(self.model)
        return self.full_state_dict()

    def full_state_dict(self) -> dict[str, Any]:
        """The whole model's state dict; with LoRA the plain model's, every adapter merged."""
        if self.lora is not None:

            return merged_state_dict(self.model)
        return super().full_state_dict()

    def parameter_counts(self) -> dict[str, Any]:
        """``{"total", "trainable", "lora_rank"}`` of the policy (``trainable`` is the adapters' with LoRA)."""

        return {**parameter_counts(self.model), "lora_rank": int(self.lora.rank) if self.lora is not None else 0}

    def _write_weights(self, role_dir: str, weights: dict[str, Any]) -> None:
        """A Hugging Face model directory that loads without skyrl-nb: ``model.safetensors`` (LoRA merged),
        ``config.json``, ``generation_config.json`` and the base model's tokenizer; with LoRA also the PEFT
        adapter (``adapter_model.safetensors``, ``adapter_config.json``)."""

        if self.lora is not None:

            self.unwrapped.get_base_model().save_pretrained(role_dir, state_dict=weights, safe_serialization=True)
            save_adapter(self.unwrapped, role_dir)
        else:
            self.unwrapped.save_pretrained(role_dir, state_dict=weights, safe_serialization=True)
        copy_tokenizer_files(self.model_path, role_dir)

    def _read_weights(self, role_dir: str) -> dict[str, Any]:
        """The checkpoint's weights: its LoRA adapter (with LoRA), else the consolidated model."""

        saved_lora = has_adapter(role_dir)
        if (self.lora is not None) != saved_lora:
            now = f"trainer.policy.model.lora.rank={self.lora.rank}" if self.lora is not None else "no LoRA"
            then = "a LoRA adapter" if saved_lora else "no LoRA adapter (a full fine-tune)"
            raise ValueError(f"trainer.policy.model.lora.rank: {os.path.dirname(role_dir)} holds {then}, but this "
                             f"run has {now}; resume with the LoRA settings the checkpoint was trained with")
        if self.lora is None:
            return super()._read_weights(role_dir)

        return read_adapter(role_dir)

    def _load_weights(self, role_dir: str, weights: dict[str, Any]) -> None:
        """Install what :meth:`_read_weights` read: the adapters over the base model (with LoRA)."""
        if self.lora is None:
            return super()._load_weights(role_dir, weights)

        install_adapter(self.model, weights, role_dir)
