"""Ray for the engine: join the cluster a job was submitted to, or start a private local one.

- Submitted through the Jobs API, ``RAY_ADDRESS`` is set: join that cluster.
- Inside any Ray job (``RAY_JOB_SUBMISSION_ID`` / ``RAY_JOB_ID`` set) without it: ``address="auto"``.
- Run by hand: start a private local cluster (own temp dir, no dashboard, ``address="local"`` so a
  stale ``ray_current_cluster`` file of some other cluster is never picked up, and token auth off so
  nothing is written to ``~/.ray``); it is shut down when the run ends.

The generator and the trainer are Ray actors placed by ``trainer.placement``
(:mod:`skyrl_engine.placement`): colocated (on GPUs; on CPU a colocated run stays in the job's own
process, see ``__main__``), both sit in one bundle (half a slot each); disaggregated, each has its own
bundle. Each sets torch's thread count itself (Ray would leave it at 1). With ``gae`` a critic actor
(critic.py) joins them and asks for no CPU: its passes and the trainer's never overlap.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

from skyrl_engine.critic import CriticWorker, critic_model_path, needs_critic
from skyrl_engine.generator import GeneratorOutput
from skyrl_engine.multiturn import generator_worker_class, generator_worker_kwargs
from skyrl_engine.policy import PolicyWorker, TrainBatch

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


class RayWorkers:
    """The generator and trainer actors behind the loop's ``Workers`` interface."""

    def __init__(self, model_path: str, cfg: Any, total_steps: int):
        import ray

        from skyrl_engine.placement import Placement, plan_placement

        threads = cfg.trainer.num_threads or available_cpus()
        # PlacementError (one line) when the cluster cannot hold what trainer.placement asks for
        self.placement = Placement.create(plan_placement(cfg))
        policy_cls = ray.remote(PolicyWorker).options(**self.placement.policy_options(0))
        # multi-turn when max_turns > 1
        generator_cls = ray.remote(generator_worker_class(cfg)).options(**self.placement.engine_options(0))
        self.policy = policy_cls.remote(model_path, cfg, total_steps, threads)
        self.generator = generator_cls.remote(model_path, threads, cfg.environment.env_class, **generator_worker_kwargs(cfg))
        self.critic = None  # gae: a third actor beside the policy (critic.py)
        if needs_critic(cfg):
            # no CPU of its own: the critic's passes and the policy's never run at the same time
            critic_cls = ray.remote(num_cpus=0)(CriticWorker)
            self.critic = critic_cls.remote(critic_model_path(cfg, model_path), cfg, total_steps, threads)
        ray.get([actor.ping.remote() for actor in self._actors()])

    def _actors(self) -> list[Any]:
        return [a for a in (self.generator, self.policy, self.critic) if a is not None]

    def generate(self, rows, n, params, seed) -> GeneratorOutput:
        import ray

        return ray.get(self.generator.generate.remote(rows, n, params, seed))

    def evaluate(self, rows, n, params, seed, batch_size) -> dict:
        import ray

        return ray.get(self.generator.evaluate.remote(rows, n, params, seed, batch_size))

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        import ray

        return ray.get(self.policy.train_step.remote(batch))

    def critic_values(self, batch: TrainBatch) -> Any:
        import ray

        return ray.get(self.critic.compute_values.remote(batch))

    def critic_train_step(self, batch: TrainBatch) -> dict[str, float]:
        import ray

        return ray.get(self.critic.train_step.remote(batch))

    def sync_weights(self) -> None:
        """Trainer → generator: the state dict travels through the object store, not the driver."""
        import ray

        ray.get(self.generator.load_weights.remote(self.policy.get_weights.remote()))

    def save_checkpoint(self, ckpt_dir: str, extra: dict[str, Any]) -> None:
        import ray

        saves = [self.policy.save_checkpoint.remote(ckpt_dir, extra)]
        if self.critic is not None:
            saves.append(self.critic.save_checkpoint.remote(ckpt_dir))
        ray.get(saves)

    def load_checkpoint(self, ckpt_dir: str) -> dict[str, Any]:
        import ray

        extra = ray.get(self.policy.load_checkpoint.remote(ckpt_dir))
        if self.critic is not None:
            ray.get(self.critic.load_checkpoint.remote(ckpt_dir))
        self.sync_weights()
        return extra

    def shutdown(self) -> None:
        import ray

        for actor in self._actors():
            try:
                ray.kill(actor)
            except Exception:  # noqa: BLE001 - the actor may already be gone
                pass
        self.placement.remove()
