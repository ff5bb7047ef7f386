"""Ray for the engine: join the cluster a job was submitted to, or start a private local one.

- Submitted through the Jobs API, ``RAY_ADDRESS`` is set: join that cluster.
- Inside any Ray job (``RAY_JOB_SUBMISSION_ID`` / ``RAY_JOB_ID`` set) without it: ``address="auto"``.
- Run by hand: start a private local cluster (own temp dir, no dashboard, ``address="local"`` so a
  stale ``ray_current_cluster`` file of some other cluster is never picked up, and token auth off so
  nothing is written to ``~/.ray``); it is shut down when the run ends.

The roles that run as Ray actors, and where, are :class:`skyrl_engine.workers.Workers`' business.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
from typing import Any

JOB_ENV_VARS = ("RAY_JOB_SUBMISSION_ID", "RAY_JOB_ID")
START_ATTEMPTS = 2


def available_cpus() -> int:
    """CPU cores this process may use."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def is_submitted_job() -> bool:
    """True when this process runs as (or inside) a Ray job, i.e. there is a cluster to join."""
    return bool(os.environ.get("RAY_ADDRESS") or any(os.environ.get(v) for v in JOB_ENV_VARS))


class RayConnection:
    """Whether we joined a cluster or started one (and then own its shutdown and temp dir)."""

    def __init__(self, mode: str, temp_dir: str | None = None):
        self.mode = mode
        self.temp_dir = temp_dir

    def close(self) -> None:
        """Shut Ray down in this process; remove the private temp dir of a local cluster."""
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"RayConnection(mode={self.mode!r})"


def connect(num_cpus: int | None = None) -> RayConnection:
    """Join the cluster this job runs on, or start a private local one (see module docstring)."""
    import ray

    if ray.is_initialized():
        connection = RayConnection("existing")
    elif is_submitted_job():
        ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=True)
        connection = RayConnection("joined")
    else:
        temp_dir = start_private_ray(num_cpus or available_cpus(), attempts=START_ATTEMPTS, log_to_driver=True)
        connection = RayConnection("local", temp_dir)
    register_tensor_transport()
    return connection


# --------------------------------------------------------------------------------------------------
# CPU tensors through Ray's object store as NumPy buffers

#: dtypes NumPy has no type for travel as a same-width integer view
_WIRE_VIEWS = {"bfloat16": "int16", "float8_e4m3fn": "uint8", "float8_e5m2": "uint8"}


def tensor_to_wire(tensor: Any) -> tuple:
    """How a torch tensor crosses a process boundary in Ray: a CPU tensor as a NumPy array, which Ray moves as
    an out-of-band buffer (one memcpy), instead of torch's pickling (a ``torch.save`` of every storage; for the
    tiny model's 27 weights 20-24 ms a put+get against 5-6 ms). Anything else (GPU, sparse, quantized, a dtype
    NumPy cannot view) goes as torch pickles it. The inverse is :func:`tensor_from_wire`."""
    import torch

    name = str(tensor.dtype).removeprefix("torch.")
    if tensor.device.type == "cpu" and tensor.layout == torch.strided and not tensor.is_quantized:
        try:
            flat = tensor.detach().resolve_conj().resolve_neg().contiguous()
            view = _WIRE_VIEWS.get(name)
            array = (flat.view(getattr(torch, view)) if view else flat).numpy()
            return ("numpy", array, name if view else None, bool(tensor.requires_grad))
        except (TypeError, RuntimeError):
            pass
    return ("pickle", pickle.dumps(tensor))


def tensor_from_wire(wire: tuple) -> Any:
    """The tensor :func:`tensor_to_wire` sent: a writable tensor of its own (a buffer from the object store is
    read-only, so it is copied), with its dtype and ``requires_grad``."""
    import torch

    if wire[0] == "pickle":
        return pickle.loads(wire[1])
    _, array, view_of, requires_grad = wire
    tensor = torch.from_numpy(array if array.flags.writeable else array.copy())
    if view_of:
        tensor = tensor.view(getattr(torch, view_of))
    return tensor.requires_grad_(True) if requires_grad else tensor


def register_tensor_transport() -> None:
    """Send torch tensors from this process with :func:`tensor_to_wire` (a no-op before Ray is up here).

    Ray keeps custom serializers per process: the job's driver registers once it is connected, every worker
    as it starts (:func:`skyrl_engine.policy.prepare_worker`). The receiving side needs nothing: each payload
    names :func:`tensor_from_wire`.
    """
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return
    import torch

    ray.util.register_serializer(torch.Tensor, serializer=tensor_to_wire, deserializer=tensor_from_wire)


def start_private_ray(
    num_cpus: int, temp_dir: str | None = None, attempts: int = 3, log_to_driver: bool = False
) -> str:
    """Start a private local Ray cluster in this process (tests, benchmarks); return its temp dir.

    Own short temp dir (Ray's socket paths have a length limit), no dashboard, token auth off. On a
    busy 2-core machine Ray's agents can miss the raylet's start-up deadline, so the start runs at a
    raised priority (root only; the processes go back to normal afterwards) and is retried.
    Stop it with ``ray.shutdown()``.
    """
    import tempfile

    import ray

    from skyrl_core import procs

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp_dir = temp_dir or tempfile.mkdtemp(prefix="skyrl-ray-", dir="/tmp")
    boost = procs.permitted_nice(-10)
    last: Exception | None = None
    for _ in range(attempts):
        before = procs.children_of("self")
        if boost:
            # with sched autogroup, the session's group niceness is what counts
            procs.nice_with_autogroup("self", boost)
        try:
            ray.init(
                address="local",
                num_cpus=num_cpus,
                num_gpus=0,
                include_dashboard=False,
                _temp_dir=temp_dir,
                configure_logging=False,
                log_to_driver=log_to_driver,
            )
            return temp_dir
        except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception on a start-up timeout
            last = exc
            ray.shutdown()
        finally:
            if boost:
                procs.nice_with_autogroup("self", 0)
                for pid in procs.children_of("self") - before:
                    procs.renice_tree(pid, 0)
    raise RuntimeError(f"could not start a local Ray cluster in {attempts} attempts: {last}")
