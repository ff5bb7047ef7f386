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

    plan = plan_placement(cfg)                 # pure arithmetic, no Ray
    plan.problems(cluster_resources())         # [] when it can exist on this cluster
    placement = Placement.create(plan)         # raises PlacementError (one line) when it cannot
    Trainer.options(**placement.policy_options(0)).remote(...)
    Engine.options(**placement.engine_options(i)).remote(...)
    placement.remove()
"""

from __future__ import annotations

import html
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ClusterResources",
    "Placement",
    "PlacementError",
    "PlacementPlan",
    "cluster_resources",
    "plan_placement",
    "start_private_ray",
]

# Share of a colocated bundle each side asks for, so both fit in the same bundle (SkyRL uses
# fractional GPUs the same way: 0.2 for the trainer workers, the rest for the engine).
_COLOCATED_POLICY_SHARE = 0.5
_COLOCATED_ENGINE_SHARE = 0.5


class PlacementError(RuntimeError):
    """The placement asked for cannot exist (or cannot be had) on this cluster; the message is one line."""


@dataclass(frozen=True)
class ClusterResources:
    """What a Ray cluster has: totals and, per alive node, its own totals."""

    total: dict[str, float]
    nodes: list[dict[str, float]] = field(default_factory=list)

    def largest_node(self, resource: str) -> float:
        """The most of ``resource`` that any single node has."""
        return max((n.get(resource, 0.0) for n in self.nodes), default=self.total.get(resource, 0.0))


def cluster_resources() -> ClusterResources:
    """Read the connected Ray cluster's resources (``ray.init`` must have run)."""
    import ray

    nodes = [
        {k: float(v) for k, v in n.get("Resources", {}).items()} for n in ray.nodes() if n.get("Alive", False)
    ]
    return ClusterResources(total={k: float(v) for k, v in ray.cluster_resources().items()}, nodes=nodes)


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
                f"{self._unit()} but the engines use num_engines × tensor_parallel_size = "
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
        for resource in ("GPU", "CPU"):
            want = need.get(resource, 0.0)
            have = cluster.total.get(resource, 0.0)
            if want > have:
                problems.append(
                    f"trainer.placement: {self.describe()} needs {_fmt(want)} {resource} but the cluster has "
                    f"{_fmt(have)} {resource} in all"
                )
        if not problems:
            for bundle in self.policy_bundles:
                for resource, want in bundle.items():
                    if want > cluster.largest_node(resource):
                        problems.append(
                            f"trainer.placement.policy_num_gpus_per_node: one policy node needs {_fmt(want)} "
                            f"{resource} but the largest node has {_fmt(cluster.largest_node(resource))}"
                        )
                break
        if not problems and self.policy_strategy == "STRICT_SPREAD" and cluster.nodes:
            bundle = self.policy_bundles[0]
            fit = sum(all(node.get(k, 0.0) >= v for k, v in bundle.items()) for node in cluster.nodes)
            if fit < self.policy_num_nodes:
                problems.append(
                    f"trainer.placement.policy_num_nodes: {self.policy_num_nodes} policy nodes need "
                    f"{self.policy_num_nodes} Ray nodes that can each hold {_fmt_resources(bundle)}, but only "
                    f"{fit} of the cluster's {len(cluster.nodes)} alive node(s) can"
                )
        return problems

    def describe(self) -> str:
        """One line: which sides get how many of what."""
        unit = self._unit()
        if self.colocate_all:
            return (
                f"colocated: {self.engine_slots} shared {unit} bundle(s) for "
                f"{self.num_engines} engine(s) × tp {self.tensor_parallel_size} and the policy"
            )
        return (
            f"disaggregated: policy {self.policy_num_nodes} node(s) × {self.policy_num_gpus_per_node} {unit} "
            f"+ {self.num_engines} engine(s) × tp {self.tensor_parallel_size} {unit}"
        )

    def _unit(self) -> str:
        return "GPU" if self.device == "GPU" else "CPU"

    def __repr__(self) -> str:
        return f"PlacementPlan({self.describe()}; reserves {_fmt_resources(self.total())})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def plan_placement(cfg: Any = None, *, device: str | None = None, **overrides: Any) -> PlacementPlan:
    """Build the plan from ``trainer.placement`` and ``generator.inference_engine`` of a config (a JobConfig,
    dotted dict or nested dict; keys it lacks take the schema's defaults, SkyRL's).

    ``device`` is "GPU" or "CPU"; None picks GPU when the connected Ray cluster has any, else CPU.
    Keyword overrides use the last part of the key: ``plan_placement(cfg, colocate_all=False)``.

    >>> plan_placement({"trainer.placement.colocate_all": False}, device="CPU").total()
    {'CPU': 2.0}
    """
    from skyrl_core.config import as_config

    job = as_config(cfg)
    placement, engine = job.trainer.placement, job.generator.inference_engine
    values = {"colocate_all": placement.colocate_all, "policy_num_nodes": placement.policy_num_nodes,
              "policy_num_gpus_per_node": placement.policy_num_gpus_per_node,
              "num_engines": engine.num_engines, "tensor_parallel_size": engine.tensor_parallel_size}
    values.update(overrides)
    if device is None:
        device = "GPU" if cluster_resources().total.get("GPU", 0.0) > 0 else "CPU"
    device = device.upper()
    if device not in ("GPU", "CPU"):
        raise ValueError(f"device: {device!r} is not allowed; allowed: GPU, CPU")
    return PlacementPlan(
        colocate_all=bool(values["colocate_all"]),
        device=device,
        policy_num_nodes=int(values["policy_num_nodes"]),
        policy_num_gpus_per_node=int(values["policy_num_gpus_per_node"]),
        num_engines=int(values["num_engines"]),
        tensor_parallel_size=int(values["tensor_parallel_size"]),
    )


class Placement:
    """The placement groups of a plan, reserved on the connected Ray cluster."""

    def __init__(self, plan: PlacementPlan, engine_group: Any, policy_group: Any | None) -> None:
        self.plan = plan
        self.engine_group = engine_group
        self.policy_group = policy_group

    @classmethod
    def create(cls, plan: PlacementPlan, timeout_s: float = 60.0) -> Placement:
        """Reserve the bundles; raise :class:`PlacementError` (one line) if they cannot exist or be had in time."""
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        problems = plan.problems(cluster_resources())
        if problems:
            raise PlacementError("; ".join(problems))
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
                f"(reserves {_fmt_resources(plan.total())}; free now: {_fmt_resources(available)}); "
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


def _fmt(x: float) -> str:
    return f"{x:g}"


def _fmt_resources(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{_fmt(v)} {k}" for k, v in sorted(resources.items())) or "nothing"


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
