"""Data-parallel and sharded training across ranks: Ray actors forming one ``torch.distributed`` group.

A role with N > 1 ranks (``trainer.placement.policy_num_nodes × policy_num_gpus_per_node``) is N actors
of the same worker class. Rank 0 names a rendezvous address, every rank joins the group (NCCL on CUDA,
gloo on CPU) and wraps its model:

- ``fsdp2``: PyTorch's own ``fully_shard`` on each decoder layer and on the whole model, so parameters,
  gradients and AdamW state are sharded across ranks (each keeps 1/N of every tensor);
- ``ddp``: ``DistributedDataParallel``, every rank a full replica, when ``trainer.strategy=ddp`` asks for
  it, or as the fallback when ``fully_shard`` refuses the model before wrapping any of it (the rank
  records why). FSDP2 ran wherever it was tried (CPU/gloo here, torch 2.13). Each rank reports the
  strategy it wrapped with, and the run's ``started`` event records it.

``trainer.<role>.fsdp_config`` (SkyRL's keys) shapes the fsdp2 wrap: ``mixed_precision`` becomes FSDP2's
``MixedPrecisionPolicy``, ``reshard_after_forward`` is passed through, ``cpu_offload`` becomes its
``CPUOffloadPolicy`` on CUDA (on a CPU device the parameters already live in host memory).

Each rank trains on its contiguous slice of every mini-batch while the loss keeps the global mini-batch's
normalisation (its sequence and token counts). Both wrappers average gradients over the ranks (gloo
cannot reduce-scatter with FSDP2's pre-multiplied sum), so each rank scales its loss by the world size
(:attr:`DistributedContext.loss_scale`): the average is then the sum, and an update equals the one a
single worker makes on the whole mini-batch up to float summation order.
"""

from __future__ import annotations

import socket
from typing import Any

__all__ = ["DistributedContext", "local_shard", "node_id", "rank_slice", "rendezvous_address", "resident_bytes"]

_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def node_id() -> str:
    """The Ray node this process runs on ("" outside Ray: asking would start a Ray instance)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 - not in a Ray worker
        return ""


def rendezvous_address() -> str:
    """``tcp://<this node's address>:<a free port>`` for the group's rank 0 to listen on."""
    try:
        import ray

        host = ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray: this machine
        host = "127.0.0.1"
    return f"tcp://{host}:{free_port(host)}"


#: where :func:`free_port` looks first: above Ray's worker ports (10002-19999), below Linux's ephemeral range (32768-)
RENDEZVOUS_PORTS = (20000, 32767)


def free_port(host: str, tries: int = 64) -> int:
    """A port free on ``host`` now, from :data:`RENDEZVOUS_PORTS` where one is. Rank 0 binds it a moment later: a
    port the kernel hands out (``bind(host, 0)``) is in the ephemeral range, where any outgoing connection of the
    node's other processes (Ray's, many) can take it first, and rank 0 then fails with EADDRINUSE (seen in CI)."""
    import random

    candidates = [random.randint(*RENDEZVOUS_PORTS) for _ in range(tries)] + [0]
    for port in candidates:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return int(sock.getsockname()[1])
    raise OSError(f"no free port on {host}")


def rank_slice(rows: int, rank: int, world_size: int) -> tuple[int, int]:
    """The contiguous ``[start, stop)`` of ``rows`` that ``rank`` trains on (rows divide evenly)."""
    if rows % world_size:
        raise ValueError(f"a mini-batch of {rows} rows does not split evenly across {world_size} ranks")
    per = rows // world_size
    return rank * per, (rank + 1) * per


class DistributedContext:
    """One rank's membership of the group, and the collective operations its worker needs."""

    def __init__(self, address: str, rank: int, world_size: int, timeout_s: float = 600.0) -> None:
        import datetime

        import torch
        import torch.distributed as dist

        self.rank, self.world_size = rank, world_size
        self.loss_scale = float(world_size)  # the wrappers average the ranks' gradients; the loss wants their sum
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.backend = "nccl" if self.device == "cuda" else "gloo"
        dist.init_process_group(self.backend, init_method=address, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))

    # -- wrapping -------------------------------------------------------------------------------
    def wrap(self, model: Any, strategy: str, fsdp_config: Any = None) -> tuple[Any, str, str]:
        """``model`` sharded (fsdp2) or replicated (ddp) across the group: ``(model, strategy that ran,
        why fsdp2 fell back to ddp or "")``."""
        from skyrl_core.choices import Strategy

        if strategy == Strategy.FSDP2:
            try:
                return self._fully_shard(model, fsdp_config), str(Strategy.FSDP2), ""
            except _Unwrapped as exc:  # fully_shard refused the model before touching it
                fallback = f"fsdp2 could not wrap the model ({exc.reason}); ddp ran instead"
        else:
            fallback = ""
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model), str(Strategy.DDP), fallback

    def _fully_shard(self, model: Any, fsdp_config: Any) -> Any:
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        kwargs: dict[str, Any] = {}
        if fsdp_config is not None:
            mp = fsdp_config.mixed_precision
            if mp is not None:
                kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=getattr(torch, _DTYPES[mp.param_dtype]),
                                                           reduce_dtype=getattr(torch, _DTYPES[mp.reduce_dtype]))
            kwargs["offload_policy"] = (CPUOffloadPolicy() if fsdp_config.cpu_offload and self.device == "cuda"
                                        else OffloadPolicy())
            kwargs["reshard_after_forward"] = bool(fsdp_config.reshard_after_forward)
        mesh = init_device_mesh(self.device, (self.world_size,))
        units = [*_decoder_layers(model), model]
        for i, unit in enumerate(units):
            try:
                fully_shard(unit, mesh=mesh, **kwargs)
            except Exception as exc:
                if i == 0:
                    raise _Unwrapped(f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}") from exc
                raise  # half the model is sharded already: no clean way back to ddp
        return model

    # -- collectives ----------------------------------------------------------------------------
    def reduce_metrics(self, metrics: dict[str, float], summed: tuple[str, ...]) -> dict[str, float]:
        """Every rank's metrics combined: keys in ``summed`` add up, ``*_max`` take the largest, the rest
        average over ranks (each rank's is a mean over the same number of micro-batches)."""
        import torch
        import torch.distributed as dist

        keys = sorted(metrics)
        values = torch.tensor([metrics[k] for k in keys], dtype=torch.float64, device=self.device)
        largest = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX)
        out = {}
        for i, key in enumerate(keys):
            if key.endswith("_max"):
                out[key] = float(largest[i])
            elif key in summed:
                out[key] = float(values[i])
            else:
                out[key] = float(values[i]) / self.world_size
        return out

    def gather_rows(self, part: Any) -> Any:
        """Every rank's ``part`` (same shape on each) concatenated along the first dimension, on every rank."""
        import torch
        import torch.distributed as dist

        parts = [torch.empty_like(part) for _ in range(self.world_size)]
        dist.all_gather(parts, part.contiguous())
        return torch.cat(parts, dim=0)

    def sum_scalar(self, value: Any) -> Any:
        """``value`` (a 0-d tensor) summed over the ranks."""
        import torch.distributed as dist

        total = value.clone().to(self.device)
        dist.all_reduce(total, op=dist.ReduceOp.SUM)
        return total.cpu()

    def barrier(self) -> None:
        """Wait until every rank is here."""
        import torch.distributed as dist

        dist.barrier()

    def full_state_dict(self, model: Any) -> dict[str, Any]:
        """The whole model's state dict on CPU at rank 0 ({} on the others); every rank must call it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
        return {k: v.detach().clone() for k, v in state.items()} if self.rank == 0 else {}

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def __repr__(self) -> str:
        return f"DistributedContext(rank {self.rank} of {self.world_size}, {self.backend})"


def resident_bytes(model: Any, optimizer: Any) -> int:
    """Bytes of the parameters and optimizer state this process holds (its own shards under fsdp2)."""
    total = sum(local_shard(p).numel() * local_shard(p).element_size() for p in model.parameters())
    for state in optimizer.state.values():
        for value in state.values():
            if hasattr(value, "numel"):
                total += local_shard(value).numel() * local_shard(value).element_size()
    return total


class _Unwrapped(Exception):
    """fully_shard refused the model before wrapping any part of it."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def local_shard(tensor: Any) -> Any:
    """A DTensor's local shard; any other tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def _decoder_layers(model: Any) -> list[Any]:
    """The transformer blocks of a Hugging Face causal LM, or of a value model's body (each gets its own
    FSDP2 unit)."""
    inner = getattr(model, "model", None) or getattr(model, "body", None)
    layers = getattr(inner, "layers", None)
    return list(layers) if layers is not None else []

