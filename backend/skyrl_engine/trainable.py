"""What the policy and the critic workers share: a model, AdamW and its schedule, on one rank or on N.

A :class:`TrainableWorker` is one rank of its role. With one rank it trains the plain model; with N it
first joins the role's ``torch.distributed`` group (:meth:`rendezvous`, :meth:`join_group`, called by
:class:`skyrl_engine.workers.RankGroup`), wraps the model (fsdp2 or ddp, :mod:`skyrl_engine.distributed`)
and then trains its slice of every mini-batch. No-grad passes split the rows across the ranks too and
gather the result (:meth:`forward_rows_no_grad`).

Checkpoints (:meth:`save_checkpoint` / :meth:`load_checkpoint`) are SkyRL's layout inside the role's
directory (``global_step_N/policy`` or ``global_step_N/critic``)::

    model.safetensors                           the whole model, consolidated at rank 0 (+ config.json
                                                for the policy: a Hugging Face model directory)
    optim_world_size_W_rank_R.pt                rank R's AdamW state: its shards under fsdp2 (keyed by
                                                parameter name), the full state with one rank or ddp
    extra_state_world_size_W_rank_R.pt          LR schedule, RNG states, the caller's extra state
    fsdp_config.json                            {"fsdp_strategy", "world_size"} of the run that wrote it

Loading reads every rank file of the checkpoint, so a checkpoint written by W ranks resumes on any
number of ranks: fsdp2 shards are joined along their first dimension (how ``fully_shard`` split them)
into the full state, which ``set_optimizer_state_dict`` then splits for the ranks reading it. Every
rank reads the checkpoint directory: with ranks on several hosts ``trainer.ckpt_path`` must be storage
they share (as for SkyRL).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from skyrl_engine.distributed import (
    DistributedContext,
    local_shard,
    node_id,
    rank_slice,
    rendezvous_address,
    resident_bytes,
)
from skyrl_engine.models import copy_state_dict

if TYPE_CHECKING:
    from skyrl_core.config import FSDPConfig, OptimizerConfig, TrainerConfig
    from skyrl_engine.types import TrainBatch

FSDP_CONFIG_FILE = "fsdp_config.json"
WEIGHTS_FILE = "model.safetensors"


def optim_file(world_size: int, rank: int) -> str:
    """SkyRL's name of a rank's optimizer file."""
    return f"optim_world_size_{world_size}_rank_{rank}.pt"


def extra_state_file(world_size: int, rank: int) -> str:
    """SkyRL's name of a rank's extra-state file (LR schedule, RNG, client state)."""
    return f"extra_state_world_size_{world_size}_rank_{rank}.pt"


def make_optimizer(model: Any, optimizer_config: OptimizerConfig, total_optimizer_steps: int) -> tuple[Any, Any]:
    """AdamW over ``model``'s parameters and its LR schedule, from an ``optimizer_config`` section."""
    import torch
    from transformers import get_scheduler

    oc = optimizer_config
    trained = [p for p in model.parameters() if p.requires_grad]  # all of them, or LoRA's adapters alone
    # fused on the CPU: one pass over each tensor's parameter, gradient and moments, on plain parameters and on
    # fsdp2's DTensor shards alike (one worker and N ranks must round alike: foreach and fused part in the last bits,
    # which a two-rank test against one worker sees); SmolLM2's 135 M parameters 0.15 against 0.57 s a step on one
    # thread. Elsewhere (CUDA) foreach: one grouped op per update stage for all tensors
    cpu = all(p.device.type == "cpu" for p in trained)
    optimizer = torch.optim.AdamW(trained, lr=oc.lr, betas=tuple(oc.adam_betas), weight_decay=oc.weight_decay,
                                  **({"fused": True} if cpu else {"foreach": True}))
    scheduler = get_scheduler(str(oc.scheduler), optimizer, num_warmup_steps=oc.num_warmup_steps,
                              num_training_steps=max(1, total_optimizer_steps))
    return optimizer, scheduler


def updates_per_step(trainer: TrainerConfig, mini_batch_size: int) -> int:
    """Optimizer steps one training step makes: mini-batches per batch × update epochs."""
    return (trainer.train_batch_size // mini_batch_size) * trainer.update_epochs_per_batch


def forward_no_grad(model: Any, batch: TrainBatch, micro_rows: int, fn: Any) -> Any:
    """``fn(model, micro_batch)`` over ``batch`` in slices of ``micro_rows`` rows, without grad, concatenated."""
    import torch

    parts = []
    with torch.no_grad():
        for start in range(0, batch.sequences_BL.shape[0], max(1, micro_rows)):
            parts.append(fn(model, batch.rows(start, start + micro_rows)))
    return torch.cat(parts, dim=0)


def forward_rows(trainer: TrainerConfig) -> int:
    """Rows per no-grad forward pass: the larger of the forward and train micro-batch sizes."""
    return max(1, trainer.micro_forward_batch_size_per_gpu, trainer.micro_train_batch_size_per_gpu)


#: elements of a gradient turned to float64 at a time by ``clip_grad_norm`` (8 MiB, inside glibc's heap)
NORM_CHUNK = 1 << 20


class TrainableWorker:
    """One rank of a trained role. Subclasses set :attr:`role`, build ``self.model`` and call
    :meth:`_setup`; they write and read the consolidated weights (:meth:`_write_weights`,
    :meth:`_read_weights`)."""

    role = "trainable"
    missing_hint = ""  # appended when a checkpoint has no directory for this role

    def _setup(self, optimizer_config: OptimizerConfig, fsdp_config: FSDPConfig, total_optimizer_steps: int, rank: int,
               world_size: int) -> None:
        self.optimizer_config, self.fsdp_config = optimizer_config, fsdp_config
        self.total_optimizer_steps = max(1, total_optimizer_steps)
        self.rank, self.world_size = rank, world_size
        self.dist: Any = None  # a DistributedContext once join_group ran (world_size > 1)
        self.strategy: str | None = None  # the wrapper that ran
        self.unwrapped = self.model  # the module itself (ddp wraps it; fsdp2 shards it in place)
        if world_size == 1:
            self.optimizer, self.scheduler = make_optimizer(self.model, optimizer_config, self.total_optimizer_steps)

    # -- the group (world_size > 1; see distributed.py) ------------------------------------------
    def rendezvous(self) -> str:
        """Rank 0: an address for the group to meet at."""

        return rendezvous_address()

    def join_group(self, address: str, strategy: str) -> dict[str, Any]:
        """Join the group at ``address``, wrap the model (``fsdp2``, or ``ddp`` when asked or when fsdp2
        cannot wrap it), build the optimizer over the wrapped parameters; this rank's record:
        ``{rank, strategy, node_id, pid}`` (and ``fallback``, the reason, when ddp replaced fsdp2)."""
        self.dist = DistributedContext(address, self.rank, self.world_size)
        self.model, self.strategy, fallback = self.dist.wrap(self.model, strategy, self.fsdp_config)
        self.optimizer, self.scheduler = make_optimizer(self.model, self.optimizer_config, self.total_optimizer_steps)
        record = {"rank": self.rank, "strategy": self.strategy, "node_id": node_id(), "pid": os.getpid()}
        return {**record, "fallback": fallback} if fallback else record

    def leave_group(self) -> None:
        """Leave the group, for a rank that ends its process itself (the engine's Ray ranks are killed). The
        ranks meet, the ddp wrapper goes, then the group: its reducer holds the group, and had it been the last
        to, the group's destructor would run at exit, holding the GIL while it joins gloo's threads, one of
        which may wait for the GIL to free a finished all-reduce's tensors: a process that never ends."""
        import gc

        if self.dist is None:
            return
        self.dist.barrier()
        self.model = self.unwrapped
        gc.collect()
        self.dist.close()
        self.dist = None

    # -- passes ---------------------------------------------------------------------------------
    def my_rows(self, rows: int) -> tuple[int, int]:
        """The ``[start, stop)`` of ``rows`` this rank works on (all of them on one rank)."""

        return rank_slice(rows, self.rank, self.world_size)

    def forward_rows_no_grad(self, batch: Any, micro_rows: int, fn: Any) -> Any:
        """``fn(model, micro_batch)`` over the batch without grad, concatenated along rows; with N ranks
        each computes its slice and every rank gets the whole (the ranks' passes must match in number)."""
        if self.dist is None:
            return forward_no_grad(self.model, batch, micro_rows, fn)
        first, last = self.my_rows(batch.sequences_BL.shape[0])
        return self.dist.gather_rows(forward_no_grad(self.model, batch.rows(first, last), micro_rows, fn))

    def backward(self, loss: Any) -> None:
        """``loss.backward()``, scaled so the group's averaged gradient is the sum over ranks."""
        (loss * self.dist.loss_scale if self.dist is not None else loss).backward()

    def clip_grad_norm(self, max_norm: float) -> float:
        """Clip gradients to ``max_norm`` over every rank's shards; the norm before clipping.

        The squares are summed in float64 (then across fsdp2's shards), so the norm, and the clip factor made
        from it, come out the same for one worker and for N ranks whatever order the sum took. A gradient is
        read :data:`NORM_CHUNK` elements at a time: the float64 copies of SmolLM2's 28 M-word embeddings (twice
        226 MB, past glibc's heap ceiling) came from fresh pages every step (0.2 s of a 12 s one-thread full
        fine-tuning step in an A/B); a gradient that fits one chunk (every one of the tiny model's) sums as before."""
        import torch

        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        squares = torch.zeros((), dtype=torch.float64)
        for grad in grads:
            flat = local_shard(grad).detach().reshape(-1)
            for lo in range(0, flat.numel(), NORM_CHUNK):
                squares += flat[lo:lo + NORM_CHUNK].double().pow(2).sum().cpu()
        if any(hasattr(grad, "to_local") for grad in grads):  # fsdp2: each rank holds a shard (ddp: a replica)
            squares = self.dist.sum_scalar(squares)
        norm = float(squares.sqrt())
        factor = max_norm / (norm + 1e-6)
        if factor < 1.0:
            for grad in grads:
                grad.mul_(factor)
        return norm

    def finish_metrics(self, metrics: dict[str, float], summed: tuple[str, ...]) -> dict[str, float]:
        """Add ``<role>/rank_resident_bytes_max`` (parameters + AdamW state this rank holds) and combine
        the ranks' metrics (keys in ``summed`` add up; see DistributedContext.reduce_metrics)."""

        metrics[f"{self.role}/rank_resident_bytes_max"] = float(resident_bytes(self.model, self.optimizer))
        return metrics if self.dist is None else self.dist.reduce_metrics(metrics, summed)

    def full_state_dict(self) -> dict[str, Any]:
        """The whole model's state dict (CPU tensors, detached copies); with N ranks every rank must
        call it and rank 0 gets the whole ({} on the others)."""
        if self.dist is not None:
            return self.dist.full_state_dict(self.model)

        return copy_state_dict(self.model.state_dict())

    # -- checkpoints ----------------------------------------------------------------------------
    def save_checkpoint(self, ckpt_dir: str, extra: dict[str, Any] | None = None) -> None:
        """Write this role's part of checkpoint ``ckpt_dir`` (every rank must call it; see the module)."""
        import random

        import numpy as np
        import torch

        role_dir = os.path.join(ckpt_dir, self.role)
        os.makedirs(role_dir, exist_ok=True)
        full = self.full_state_dict()
        W, r = self.world_size, self.rank
        torch.save(_optimizer_shard(self.model, self.optimizer), os.path.join(role_dir, optim_file(W, r)))
        rng = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
        torch.save({"lr_scheduler": self.scheduler.state_dict(), "client_state": dict(extra or {}), "rng": rng,
                    "fsdp_strategy": self.strategy, "world_size": W, "rank": r},
                   os.path.join(role_dir, extra_state_file(W, r)))
        if r == 0:
            self._write_weights(role_dir, full)
            with open(os.path.join(role_dir, FSDP_CONFIG_FILE), "w") as f:
                json.dump({"fsdp_strategy": self.strategy, "world_size": W}, f)
        if self.dist is not None:
            self.dist.barrier()  # every rank's files are there before any rank returns

    def load_checkpoint(self, ckpt_dir: str) -> dict[str, Any]:
        """Restore this role from checkpoint ``ckpt_dir`` written by any number of ranks; the extra state
        the saving call was given."""
        import random

        import numpy as np
        import torch

        role_dir = os.path.join(ckpt_dir, self.role)
        if not os.path.isdir(role_dir):
            raise FileNotFoundError(f"{ckpt_dir}: no {self.role} checkpoint ({role_dir} is missing){self.missing_hint}")
        saved = read_fsdp_config(role_dir)
        weights = self._read_weights(role_dir)
        self._load_weights(role_dir, weights)
        optim, extras = read_full_optimizer_state(role_dir, saved["world_size"])
        _set_optimizer_state(self.model, self.optimizer, optim, distributed=self.dist is not None)
        extra = extras[self.rank] if self.rank < len(extras) else extras[0]
        self.scheduler.load_state_dict(extra["lr_scheduler"])
        rng = extra["rng"]
        random.setstate(rng["python"])
        np.random.set_state(rng["numpy"])
        torch.set_rng_state(rng["torch"])
        return dict(extra.get("client_state") or {})

    def _load_weights(self, role_dir: str, weights: dict[str, Any]) -> None:
        """Install consolidated ``weights`` into this rank's model (its shards under fsdp2)."""
        if self.dist is not None:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

            result = set_model_state_dict(self.model, weights,
                                          options=StateDictOptions(full_state_dict=True, strict=False))
            missing, unexpected = result.missing_keys, result.unexpected_keys
        else:
            missing, unexpected = self.model.load_state_dict(weights, strict=False)
        config = getattr(self.unwrapped, "config", None)
        tied = {"lm_head.weight"} if getattr(config, "tie_word_embeddings", False) else set()
        if unexpected or set(missing) - tied:
            raise RuntimeError(f"{role_dir}: the checkpoint does not fit the model (missing {sorted(missing)}, "
                               f"unexpected {sorted(unexpected)})")

    def _write_weights(self, role_dir: str, weights: dict[str, Any]) -> None:
        """Rank 0: write the consolidated ``weights`` into ``role_dir``."""
        raise NotImplementedError

    def _read_weights(self, role_dir: str) -> dict[str, Any]:
        """The consolidated weights :meth:`_write_weights` wrote."""
        from safetensors.torch import load_file

        path = os.path.join(role_dir, WEIGHTS_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{os.path.dirname(role_dir)}: no {self.role} checkpoint ({path} is missing)")
        return load_file(path)

    def ping(self) -> int:
        """The torch thread count (also proves the actor is up)."""
        return self.num_threads

    def __repr__(self) -> str:  # Ray shows it in errors, so it must work at any stage of __init__
        params = sum(p.numel() for p in self.model.parameters()) if hasattr(self, "model") else 0
        grouped = getattr(self, "world_size", 1) > 1 or getattr(self, "dist", None) is not None
        where = f"rank {self.rank} of {self.world_size}, {self.strategy or 'not joined'}" if grouped else "one worker"
        return f"{type(self).__name__}({self.role}: {params:,} parameters, {where})"


def read_fsdp_config(role_dir: str) -> dict[str, Any]:
    """``{"fsdp_strategy", "world_size"}`` of the run that wrote ``role_dir``."""
    path = os.path.join(role_dir, FSDP_CONFIG_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{os.path.dirname(role_dir)}: {path} is missing; not a checkpoint this engine "
                                "wrote (or one from before sharded checkpoints)")
    with open(path) as f:
        return json.load(f)


def read_full_optimizer_state(role_dir: str, world_size: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The full AdamW state (parameter-name keyed) from the ``world_size`` rank files of ``role_dir``, and
    every rank's extra state."""
    import torch

    parts, extras = [], []
    for rank in range(world_size):
        for name, into in ((optim_file(world_size, rank), parts), (extra_state_file(world_size, rank), extras)):
            path = os.path.join(role_dir, name)
            if not os.path.exists(path):
                raise FileNotFoundError(f"{role_dir}: {name} is missing (the checkpoint was written by "
                                        f"{world_size} ranks)")
            into.append(torch.load(path, map_location="cpu", weights_only=False, mmap=True))
    sharded = set(map(tuple, parts[0]["sharded"]))
    state = {}
    for fqn, values in parts[0]["state"].items():
        state[fqn] = {key: torch.cat([p["state"][fqn][key] for p in parts], dim=0) if (fqn, key) in sharded
                      else value for key, value in values.items()}
    return {"state": state, "param_groups": parts[0]["param_groups"]}, extras


def _optimizer_shard(model: Any, optimizer: Any) -> dict[str, Any]:
    """This rank's AdamW state keyed by parameter name: each DTensor (an fsdp2 shard) as its local part,
    listed in ``sharded``; everything else as it is."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    from torch.distributed.tensor import DTensor

    full = get_optimizer_state_dict(model, optimizer)
    state, sharded = {}, []
    for fqn, values in full["state"].items():
        state[fqn] = {}
        for key, value in values.items():
            if isinstance(value, DTensor):
                sharded.append((fqn, key))
                value = value.to_local()
            state[fqn][key] = value.detach().clone() if hasattr(value, "detach") else value
    return {"state": state, "param_groups": full["param_groups"], "sharded": sharded}


def _set_optimizer_state(model: Any, optimizer: Any, full: dict[str, Any], *, distributed: bool) -> None:
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True) if distributed else None
    set_optimizer_state_dict(model, optimizer, full, options=options)
