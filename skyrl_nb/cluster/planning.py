"""What a config asks of a cluster, checked before anything is submitted: :func:`cluster_problems` (placement,
each rank's memory, the packages the job needs there; the same lines for the form, ``plan()`` and ``launch()``)
and :class:`JobPlan`, what ``Cluster.plan`` shows."""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_core.memory import MemoryEstimate, RankCapacity


@dataclass(frozen=True)
class JobPlan:
    """What `Cluster.plan` found: the config, what it asks for, the cluster's resources, and each
    training rank's memory estimate beside what one rank has there (None: unknown)."""

    config: JobConfig
    asks: str
    resources: dict[str, Any]
    memory: MemoryEstimate
    capacity: RankCapacity | None
    delivery: dict[str, str] = field(default_factory=dict)
    """How the job gets what it needs, one line each: ``engine code``, ``config``, ``run store``."""
    warnings: list[str] = field(default_factory=list)
    """What may go wrong without refusing the job, one line each (`memory_warnings`)."""

    def _head(self) -> str:
        have = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.resources.items())
        one_rank = repr(self.capacity) if self.capacity else "unknown"
        lines = [f"asks for: {self.asks}", f"cluster has: {have}", f"one rank has: {one_rank}",
                 *(f"{k}: {v}" for k, v in self.delivery.items())]
        return "\n".join([*lines, *(f"warning: {w}" for w in self.warnings)])

    def summary(self) -> str:
        """A few lines a person reads before launching."""
        return f"{self._head()}\n{self.memory!r}"

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        warned = "".join(f"<div style='color:#b45309'>&#9888; {html.escape(w)}</div>" for w in self.warnings)
        return f"<div>{warned}<pre>{html.escape(self._head())}</pre>{self.memory._repr_html_()}</div>"


def memory_warnings(cfg: JobConfig, cluster: Any, nodes: list[dict[str, float]] | None) -> list[str]:
    """A line when the machine the job's driver runs on has less memory than ``cfg``'s run was measured to need
    (`skyrl_core.machine_memory`); [] when it has enough or nothing is known. A warning, never a refusal.

    Which memory: on a cluster that runs here (the local head) or with no cluster (the form launches to the local
    head) this machine's physical memory. On a remote cluster the head node's (the Jobs API starts the driver
    there), as Ray's ``memory`` plus ``object_store_memory`` resources: what was free when its raylet started
    (Ray splits that between the two), so a lower bound of the node's physical size; nothing when the head is
    not among ``nodes``.
    """
    from skyrl_core.machine_memory import machine_memory_bytes, memory_warning

    if cluster is None or getattr(cluster, "runs_here", False):
        line = memory_warning(cfg, machine_memory_bytes())
    else:
        head = next((n for n in nodes or [] if "node:__internal_head__" in n), None)
        total = None if head is None else int(head.get("memory", 0) + head.get("object_store_memory", 0)) or None
        line = memory_warning(cfg, total, "the cluster's head node (Ray's memory + object store)")
    return [line] if line else []


def cluster_problems(cfg: JobConfig, nodes: list[dict[str, float]] | None, cluster: Any = None) -> list[str]:
    """Everything that keeps the validated ``cfg`` off a cluster, one line each starting with its keys:

    - placement: the engine's own rules (`skyrl_core.placement.placement_problems`) on ``nodes``, or the
      config-only ones every device breaks when ``nodes`` is None or empty (nothing known of the cluster);
    - memory: each training rank's model state against one device there (`skyrl_core.memory`);
    - packages: vLLM, SkyRL, the trackers' packages, asked of ``cluster`` once (`skyrl_nb.cluster.packages`).

    `Cluster.plan`, `Cluster.launch` and the config form all call this, so each says the same lines.
    """
    from skyrl_core.memory import capacity_from_nodes, rank_memory
    from skyrl_core.placement import ClusterResources, placement_problems
    from skyrl_nb.cluster.packages import package_problems

    resources = ClusterResources.from_nodes(nodes) if nodes else None
    problems = placement_problems(cfg, resources)
    if nodes:
        problems += rank_memory(cfg).problems(capacity_from_nodes(nodes, cfg.trainer.placement.policy_num_gpus_per_node))
    if cluster is not None:
        has_gpu = None if resources is None else resources.device == "GPU"
        problems += package_problems(cfg, cluster, has_gpu=has_gpu)
    return list(dict.fromkeys(problems))
