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
import shutil

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
        return RayConnection("existing")
    if is_submitted_job():
        ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=True)
        return RayConnection("joined")
    from skyrl_engine.placement import start_private_ray

    temp_dir = start_private_ray(num_cpus or available_cpus(), attempts=START_ATTEMPTS, log_to_driver=True)
    return RayConnection("local", temp_dir)
