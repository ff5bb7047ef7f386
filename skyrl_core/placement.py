"""Where a job's trainer and generator engines run, as arithmetic: the one set of resource and colocation rules.

SkyRL counts devices ("slots"): the policy takes ``policy_num_nodes * policy_num_gpus_per_node`` and
the engines take ``num_engines * tensor_parallel_size``.

- ``colocate_all=true``: one placement group of ``num_engines * tensor_parallel_size`` one-slot
  bundles; the policy must use exactly as many slots, and trainer and engine share each bundle.
- ``colocate_all=false`` (disaggregated): the policy gets one bundle of ``policy_num_gpus_per_node``
  slots per node (``STRICT_SPREAD`` over Ray nodes when it spans several), the engines get their own
  one-slot bundles in a second placement group.
- A colocated run of the torch backend with one policy rank on a cluster without GPUs reserves nothing:
  every role runs in the job's own process (:func:`runs_in_job_process`).

On a GPU cluster a slot is ``{"GPU": 1, "CPU": 1}``; on a CPU-only cluster it is one CPU core.

Pure Python, no Ray and no torch: the engine (``skyrl_engine.placement``), ``python -m skyrl_engine
validate``, ``Cluster.plan``, ``Cluster.launch`` and the config form all refuse a plan through
:func:`placement_problems`, so each says the same line.

>>> two_cpus = ClusterResources.from_nodes([{"CPU": 2.0}])
>>> placement_problems({"trainer.placement.colocate_all": False}, two_cpus)
[]
>>> placement_problems({"trainer.placement.policy_num_gpus_per_node": 2}, None)[0].split(":")[0]
'trainer.placement.colocate_all'
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "DEVICES",
    "ClusterResources",
    "PlacementError",
    "PlacementPlan",
    "colocated_in_one_process",
    "placement_problems",
    "plan_placement",
    "runs_in_job_process",
]

#: What one slot can be.
DEVICES = ("GPU", "CPU")


class PlacementError(RuntimeError):
    """The placement asked for cannot exist (or cannot be had) on this cluster; the message is one line, and
    ``problems`` its parts (each a line the form and ``Cluster.launch`` give for the same plan)."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems) if problems else [message]


@dataclass(frozen=True)
class ClusterResources:
    """What a Ray cluster has: totals and, per alive node, its own totals."""

    total: dict[str, float]
    nodes: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def from_nodes(cls, nodes: list[Mapping[str, float]]) -> ClusterResources:
        """The cluster made of these alive nodes (each node's resources as Ray counts them).

        >>> ClusterResources.from_nodes([{"CPU": 2.0}, {"CPU": 2.0, "GPU": 1.0}]).total
        {'CPU': 4.0, 'GPU': 1.0}
        """
        rows = [{str(k): float(v) for k, v in node.items()} for node in nodes]
        total: dict[str, float] = {}
        for row in rows:
            for key, value in row.items():
                total[key] = total.get(key, 0.0) + value
        return cls(total=total, nodes=rows)

    @property
    def device(self) -> str:
        """What one slot is here: ``GPU`` when the cluster has any, else ``CPU`` (the engine's own choice)."""
        return "GPU" if self.total.get("GPU", 0.0) > 0 else "CPU"

    def largest_node(self, resource: str) -> float:
        """The most of ``resource`` that any single node has."""
        return max((n.get(resource, 0.0) for n in self.nodes), default=self.total.get(resource, 0.0))


@dataclass(frozen=True)
class PlacementPlan:
    """How many bundles of what each side gets; built by :func:`plan_placement`, checked before use."""

    colocate_all: bool
    device: str  # "GPU" or "CPU": what one slot is
    policy_num_nodes: int
    policy_num_gpus_per_node: int
    num_engines: int
    tensor_parallel_size: int

    @property
    def policy_slots(self) -> int:
        """Devices (or CPU cores) the policy uses: nodes × per node."""
        return self.policy_num_nodes * self.policy_num_gpus_per_node

    @property
    def engine_slots(self) -> int:
        """Devices (or CPU cores) the engines use: engines × tensor parallel size."""
        return self.num_engines * self.tensor_parallel_size

    def _slot(self, n: int = 1) -> dict[str, float]:
        return {"GPU": float(n), "CPU": float(n)} if self.device == "GPU" else {"CPU": float(n)}

    @property
    def policy_bundles(self) -> list[dict[str, float]]:
        """Bundles of the policy's placement group (empty when colocated: it shares the engines')."""
        if self.colocate_all:
            return []
        return [self._slot(self.policy_num_gpus_per_node) for _ in range(self.policy_num_nodes)]

    @property
    def policy_strategy(self) -> str:
        """Ray's placement strategy for the policy's group: ``STRICT_SPREAD`` (each node's bundle on a Ray
        node of its own, as SkyRL's nodes are) when the policy spans nodes, else ``PACK``."""
        return "STRICT_SPREAD" if len(self.policy_bundles) > 1 else "PACK"

    @property
    def engine_bundles(self) -> list[dict[str, float]]:
        """One one-slot bundle per engine device; engine i owns bundles i*tp … i*tp+tp-1."""
        return [self._slot(1) for _ in range(self.engine_slots)]

    def total(self) -> dict[str, float]:
        """Resources the whole placement reserves."""
        out: dict[str, float] = {}
        for bundle in self.policy_bundles + self.engine_bundles:
            for k, v in bundle.items():
                out[k] = out.get(k, 0.0) + v
        return out

    def config_problems(self) -> list[str]:
        """Problems visible from the config alone (no cluster needed), one line each."""
        problems = []
        for key, value in (
            ("trainer.placement.policy_num_nodes", self.policy_num_nodes),
            ("trainer.placement.policy_num_gpus_per_node", self.policy_num_gpus_per_node),
            ("generator.inference_engine.num_engines", self.num_engines),
            ("generator.inference_engine.tensor_parallel_size", self.tensor_parallel_size),
        ):
            if value < 1:
                problems.append(f"{key}: {value} must be at least 1")
        if self.colocate_all and self.policy_slots != self.engine_slots:
            problems.append(
                "trainer.placement.colocate_all: the policy uses policy_num_nodes × policy_num_gpus_per_node = "
                f"{self.policy_num_nodes} × {self.policy_num_gpus_per_node} = {self.policy_slots} "
                f"{self.device} but the engines use num_engines × tensor_parallel_size = "
                f"{self.num_engines} × {self.tensor_parallel_size} = {self.engine_slots}; they must be equal "
                "when colocating (or set trainer.placement.colocate_all=false)"
            )
        return problems

    def problems(self, cluster: ClusterResources) -> list[str]:
        """Why this placement cannot exist on ``cluster``, one line each; [] when it can."""
        problems = self.config_problems()
        if problems:
            return problems
        need = self.total()
        for resource in DEVICES:
            want = need.get(resource, 0.0)
            have = cluster.total.get(resource, 0.0)
            if want > have:
                problems.append(
                    f"trainer.placement: {self.describe()} needs {_fmt(want)} {resource} but the cluster has "
                    f"{_fmt(have)} {resource} in all"
                )
        if not problems:
            for bundle in self.policy_bundles[:1]:
                for resource, want in bundle.items():
                    if want > cluster.largest_node(resource):
                        problems.append(
                            f"trainer.placement.policy_num_gpus_per_node: one policy node needs {_fmt(want)} "
                            f"{resource} but the largest node has {_fmt(cluster.largest_node(resource))}"
                        )
        if not problems and self.policy_strategy == "STRICT_SPREAD" and cluster.nodes:
            bundle = self.policy_bundles[0]
            fit = sum(all(node.get(k, 0.0) >= v for k, v in bundle.items()) for node in cluster.nodes)
            if fit < self.policy_num_nodes:
                problems.append(
                    f"trainer.placement.policy_num_nodes: {self.policy_num_nodes} policy nodes need "
                    f"{self.policy_num_nodes} Ray nodes that can each hold {fmt_resources(bundle)}, but only "
                    f"{fit} of the cluster's {len(cluster.nodes)} alive node(s) can"
                )
        return problems

    def describe(self) -> str:
        """One line: which sides get how many of what."""
        unit = self.device
        if self.colocate_all:
            return (
                f"colocated: {self.engine_slots} shared {unit} bundle(s) for "
                f"{self.num_engines} engine(s) × tp {self.tensor_parallel_size} and the policy"
            )
        return (
            f"disaggregated: policy {self.policy_num_nodes} node(s) × {self.policy_num_gpus_per_node} {unit} "
            f"+ {self.num_engines} engine(s) × tp {self.tensor_parallel_size} {unit}"
        )

    def __repr__(self) -> str:
        return f"PlacementPlan({self.describe()}; reserves {fmt_resources(self.total())})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def _placement_values(cfg: Any) -> dict[str, Any]:
    from skyrl_core.config import as_config

    job = as_config(cfg)
    placement, engine = job.trainer.placement, job.generator.inference_engine
    return {"colocate_all": placement.colocate_all, "policy_num_nodes": placement.policy_num_nodes,
            "policy_num_gpus_per_node": placement.policy_num_gpus_per_node,
            "num_engines": engine.num_engines, "tensor_parallel_size": engine.tensor_parallel_size}


def plan_placement(cfg: Any, device: str, **overrides: Any) -> PlacementPlan:
    """The plan of ``trainer.placement`` and ``generator.inference_engine`` of a config (a JobConfig, dotted
    dict or nested dict; keys it lacks take the schema's defaults, SkyRL's) where one slot is ``device``.

    Keyword overrides use the last part of the key: ``plan_placement(cfg, "CPU", colocate_all=False)``.

    >>> plan_placement({"trainer.placement.colocate_all": False}, "CPU").total()
    {'CPU': 2.0}
    """
    values = _placement_values(cfg)
    values.update(overrides)
    unit = str(device).upper()
    if unit not in DEVICES:
        raise ValueError(f"device: {device!r} is not allowed; allowed: GPU, CPU")
    return PlacementPlan(
        colocate_all=bool(values["colocate_all"]),
        device=unit,
        policy_num_nodes=int(values["policy_num_nodes"]),
        policy_num_gpus_per_node=int(values["policy_num_gpus_per_node"]),
        num_engines=int(values["num_engines"]),
        tensor_parallel_size=int(values["tensor_parallel_size"]),
    )


def colocated_in_one_process(cfg: Any) -> bool:
    """Whether ``cfg`` can run every role in the job's own process where there is no GPU: the torch backend,
    colocated, one policy rank and at most one critic rank."""
    from skyrl_core.choices import Backend
    from skyrl_core.config import as_config, critic_ranks, policy_ranks

    job = as_config(cfg)
    if job.generator.inference_engine.backend == Backend.VLLM or policy_ranks(job) > 1 or critic_ranks(job) > 1:
        return False  # vLLM engines and several ranks are Ray actors
    return bool(job.trainer.placement.colocate_all)


def runs_in_job_process(cfg: Any, device: str) -> bool:
    """True for a colocated run of the torch backend with one rank where one slot is a CPU: it reserves
    nothing, every role lives in the job's own process. Anything else goes through a :class:`PlacementPlan`."""
    return str(device).upper() == "CPU" and colocated_in_one_process(cfg)


def placement_problems(cfg: Any, cluster: ClusterResources | None, device: str | None = None) -> list[str]:
    """Why the engine would refuse ``cfg``'s placement, one line each ([] when it would not).

    ``cluster`` given: on that cluster, where one slot is ``device`` (default: the cluster's own,
    :attr:`ClusterResources.device`). ``cluster`` None: the config-only rules, on ``device``, or with
    ``device`` None the ones every device breaks, in a CPU cluster's words (a form with no cluster).
    """
    if cluster is not None:
        unit = device or cluster.device
        return [] if runs_in_job_process(cfg, unit) else plan_placement(cfg, unit).problems(cluster)
    if device is not None:
        return [] if runs_in_job_process(cfg, device) else plan_placement(cfg, device).config_problems()
    on_each = [placement_problems(cfg, None, unit) for unit in ("CPU", "GPU")]  # said as a CPU cluster says it
    return [line for line in on_each[0] if all(line.replace("GPU", "CPU") in [x.replace("GPU", "CPU") for x in other]
                                               for other in on_each[1:])]


def _fmt(x: float) -> str:
    return f"{x:g}"


def fmt_resources(resources: Mapping[str, float]) -> str:
    """``{"CPU": 2.0, "GPU": 1.0}`` -> ``"2 CPU, 1 GPU"`` (``nothing`` when empty)."""
    return ", ".join(f"{_fmt(v)} {k}" for k, v in sorted(resources.items())) or "nothing"
