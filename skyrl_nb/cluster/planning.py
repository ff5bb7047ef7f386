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

    def _head(self) -> str:
        have = ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in self.resources.items())
        one_rank = repr(self.capacity) if self.capacity else "unknown"
        lines = [f"asks for: {self.asks}", f"cluster has: {have}", f"one rank has: {one_rank}",
                 *(f"{k}: {v}" for k, v in self.delivery.items())]
        return "\n".join(lines)

    def summary(self) -> str:
        """A few lines a person reads before launching."""
        return f"{self._head()}\n{self.memory!r}"

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return f"<div><pre>{html.escape(self._head())}</pre>{self.memory._repr_html_()}</div>"


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
