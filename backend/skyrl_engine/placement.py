"""Where the trainer and the generator engines run: Ray placement groups with SkyRL's accounting.

SkyRL counts devices ("slots"): the policy takes ``policy_num_nodes * policy_num_gpus_per_node`` and
the engines take ``num_engines * tensor_parallel_size``.

- ``colocate_all=true``: one placement group of ``num_engines * tensor_parallel_size`` one-slot
  bundles; the policy must use exactly as many slots, and trainer and engine share each bundle,
  taking turns (the engine sleeps while the trainer trains, where the backend supports it).
- ``colocate_all=false`` (disaggregated): the policy gets one bundle of
  ``policy_num_gpus_per_node`` slots per node, the engines get their own one-slot bundles in a second
  placement group; the two sides run at the same time in separate processes. With more than one policy
  node the policy's group is ``STRICT_SPREAD``: each node's bundle on a different Ray node.

On a GPU cluster a slot is ``{"GPU": 1, "CPU": 1}``; on a CPU-only cluster a slot is one CPU core,
so "disaggregated" means separate processes, each with its own CPU bundle.

The arithmetic and its rules live in :mod:`skyrl_core.placement` (pure Python), so the config form,
``Cluster.plan`` / ``Cluster.launch`` and ``python -m skyrl_engine validate`` refuse exactly what
:meth:`Placement.create` would, with the same line. This module adds what needs Ray.

    plan = plan_placement(cfg)                 # pure arithmetic (the device read from the connected cluster)
    plan.problems(cluster_resources())         # [] when it can exist on this cluster
    placement = Placement.create(plan)         # raises PlacementError (one line) when it cannot
    Trainer.options(**placement.policy_options(0)).remote(...)
    Engine.options(**placement.engine_options(i)).remote(...)
    placement.remove()
"""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING, Any

# The arithmetic and the rules are skyrl_core's (the form, Cluster.plan/launch and `validate` use the same).
from skyrl_core.placement import (
    ClusterResources,
    PlacementError,
    PlacementPlan,
    colocated_in_one_process,
    fmt_resources,
    placement_problems,
)
from skyrl_core.placement import plan_placement as _plan_on
from skyrl_core.resume import NODE_WAIT_ENV
from skyrl_engine.ray_runtime import is_submitted_job

if TYPE_CHECKING:
    from collections.abc import Callable

    from skyrl_core.config import JobConfig

__all__ = [
    "ClusterResources",
    "Placement",
    "PlacementError",
    "PlacementPlan",
    "cluster_resources",
    "plan_placement",
    "refuse_impossible",
    "validate_placement",
]

# Share of a colocated bundle each side asks for, so both fit in the same bundle (SkyRL uses
# fractional GPUs the same way: 0.2 for the trainer workers, the rest for the engine).
_COLOCATED_POLICY_SHARE = 0.5
_COLOCATED_ENGINE_SHARE = 0.5


def restart_wait_s() -> float:
    """How long a restarted trainer waits for its placement to fit (``skyrl_core.resume.NODE_WAIT_ENV``); 0 else."""
    try:
        return max(0.0, float(os.environ.get(NODE_WAIT_ENV) or 0))
    except ValueError:
        return 0.0


def cluster_resources() -> ClusterResources:
    """Read the connected Ray cluster's resources (``ray.init`` must have run)."""
    import ray

    nodes = [
        {k: float(v) for k, v in n.get("Resources", {}).items()} for n in ray.nodes() if n.get("Alive", False)
    ]
    return ClusterResources(total={k: float(v) for k, v in ray.cluster_resources().items()}, nodes=nodes)


def plan_placement(cfg: JobConfig | None = None, *, device: str | None = None, **overrides: Any) -> PlacementPlan:
    """``skyrl_core.placement.plan_placement`` where ``device`` None picks GPU when the connected Ray cluster
    has any, else CPU.

    >>> plan_placement({"trainer.placement.colocate_all": False}, device="CPU").total()
    {'CPU': 2.0}
    """
    if device is None:
        device = cluster_resources().device
    return _plan_on(cfg, device, **overrides)


def refuse_impossible(plan: PlacementPlan, cluster: ClusterResources | None = None) -> None:
    """Raise :class:`PlacementError` (one line) when ``plan`` cannot exist on ``cluster`` (default: the
    connected Ray cluster's resources). The engine's refusal: :meth:`Placement.create` calls it first."""
    problems = plan.problems(cluster if cluster is not None else cluster_resources())
    if problems:
        raise PlacementError("; ".join(problems), problems)


def wait_until_possible(plan: PlacementPlan, wait_s: float, poll_s: float = 5.0,
                        log: Callable[[str], None] | None = None) -> list[str]:
    """Wait up to ``wait_s`` for ``plan`` to fit on the connected cluster; returns what is still missing ([] once
    it fits). A restarted trainer (``trainer.max_restarts``) waits so, for nodes to join: after a node is lost,
    the cluster may lack it until its replacement joins (HyperPod's node recovery, an autoscaler)."""
    import time

    deadline = time.monotonic() + wait_s
    told = False
    while True:
        problems = plan.problems(cluster_resources())
        if not problems or time.monotonic() >= deadline:
            return problems
        if not told and log is not None:
            log(f"placement: waiting up to {wait_s:g} s for nodes to join (a restart): {'; '.join(problems)}")
            told = True
        time.sleep(poll_s)


def validate_placement(cfg: JobConfig) -> list[str]:
    """What ``python -m skyrl_engine validate`` says of ``cfg``'s placement: on the Ray cluster the process runs
    in (a submitted job), the cluster-size rules too; by hand, the config-only rules ``train`` by hand applies."""

    if is_submitted_job():
        import ray

        started = not ray.is_initialized()
        if started:
            ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False, configure_logging=False)
        try:
            return placement_problems(cfg, cluster_resources())
        finally:
            if started:
                ray.shutdown()
    # By hand, train starts a private Ray with CPU slots only (start_private_ray), and runs every role in its own
    # process when the config allows it and there is no CUDA: the rules that train would then apply.
    lines = _plan_on(cfg, "CPU").config_problems()
    if lines and colocated_in_one_process(cfg):
        import torch  # only when the answer depends on it, as workers.runs_in_job_process asks

        return lines if torch.cuda.is_available() else []
    return lines


class Placement:
    """The placement groups of a plan, reserved on the connected Ray cluster."""

    def __init__(self, plan: PlacementPlan, engine_group: Any, policy_group: Any | None) -> None:
        self.plan = plan
        self.engine_group = engine_group
        self.policy_group = policy_group

    @classmethod
    def create(cls, plan: PlacementPlan, timeout_s: float = 60.0) -> Placement:
        """Reserve the bundles; raise :class:`PlacementError` (one line) if they cannot exist or be had in time.

        A restarted trainer (:func:`restart_wait_s`) waits longer, first for the plan to fit, then for the bundles:
        a lost node may still count as alive for a while, and its replacement may still be joining."""
        import time

        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        wait_s = restart_wait_s()
        if wait_s:  # a restarted trainer: the nodes a lost one took may come back (wait_until_possible)
            deadline = time.monotonic() + wait_s
            wait_until_possible(plan, wait_s, log=lambda text: print(f"[skyrl_engine] {text}", flush=True))
            timeout_s = max(timeout_s, deadline - time.monotonic())
        refuse_impossible(plan)
        engine_group = placement_group(plan.engine_bundles, strategy="PACK")
        policy_group = (placement_group(plan.policy_bundles, strategy=plan.policy_strategy)
                        if plan.policy_bundles else None)
        groups = [g for g in (engine_group, policy_group) if g is not None]
        try:
            ray.get([g.ready() for g in groups], timeout=timeout_s)
        except Exception as exc:  # GetTimeoutError: the resources exist but others hold them
            for g in groups:
                remove_placement_group(g)
            available = {k: v for k, v in ray.available_resources().items() if k in ("CPU", "GPU")}
            raise PlacementError(
                f"trainer.placement: {plan.describe()} was not granted within {timeout_s:g} s "
                f"(reserves {fmt_resources(plan.total())}; free now: {fmt_resources(available)}); "
                f"other actors or placement groups hold the resources ({type(exc).__name__})"
            ) from None
        return cls(plan, engine_group, policy_group)

    def _strategy(self, group: Any, bundle_index: int) -> Any:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(
            placement_group=group,
            placement_group_bundle_index=bundle_index,
            placement_group_capture_child_tasks=True,
        )

    def policy_options(self, rank: int = 0) -> dict[str, Any]:
        """``ray.remote(...).options(**this)`` for policy rank ``rank``: one device (a GPU, or a CPU on a
        CPU cluster) of its node's bundle, or colocated, its share of engine bundle ``rank``."""
        plan = self.plan
        if plan.colocate_all:
            share = _COLOCATED_POLICY_SHARE
            return {**self._resources(share), "scheduling_strategy": self._strategy(self.engine_group, rank)}
        per_node = max(1, plan.policy_num_gpus_per_node)
        if not 0 <= rank < plan.policy_num_nodes * per_node:
            raise IndexError(f"rank {rank} out of range: the plan has {plan.policy_num_nodes * per_node} policy rank(s)")
        return {**self._resources(min(1, plan.policy_num_gpus_per_node)),
                "scheduling_strategy": self._strategy(self.policy_group, rank // per_node)}

    def critic_options(self, rank: int = 0) -> dict[str, Any]:
        """``ray.remote(...).options(**this)`` for critic rank ``rank``: policy rank ``rank``'s bundle with no
        CPU of its own (the critic's passes and the policy's never run at the same time)."""
        return {"num_cpus": 0, "scheduling_strategy": self.policy_options(rank)["scheduling_strategy"]}

    def engine_options(self, engine_index: int) -> dict[str, Any]:
        """``ray.remote(...).options(**this)`` for engine ``engine_index`` (sits on its first bundle)."""
        plan = self.plan
        if not 0 <= engine_index < plan.num_engines:
            raise IndexError(f"engine {engine_index} out of range: the plan has {plan.num_engines} engine(s)")
        share = _COLOCATED_ENGINE_SHARE if plan.colocate_all else 1.0
        bundle = engine_index * plan.tensor_parallel_size
        return {**self._resources(share), "scheduling_strategy": self._strategy(self.engine_group, bundle)}

    def _resources(self, amount: float) -> dict[str, float]:
        if self.plan.device == "GPU":
            return {"num_gpus": float(amount), "num_cpus": float(amount)}
        return {"num_cpus": float(amount)}

    def remove(self) -> None:
        """Give the bundles back to the cluster (actors in them must be gone first)."""
        from ray.util.placement_group import remove_placement_group

        for g in (self.engine_group, self.policy_group):
            if g is not None:
                remove_placement_group(g)
        self.engine_group = self.policy_group = None

    def __enter__(self) -> Placement:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()

    def __repr__(self) -> str:
        state = "reserved" if self.engine_group is not None else "removed"
        return f"Placement({self.plan.describe()}; {state})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"
