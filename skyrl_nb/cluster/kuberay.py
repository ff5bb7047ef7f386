"""KubeRay's side of a Ray cluster on HyperPod: the ``RayCluster`` manifest skyrl-nb writes (instance
shapes, worker groups, FSx, EFA, token auth) and the status it reads back (the RayCluster object and
its pods). No AWS and no Kubernetes calls here: :mod:`skyrl_nb.cluster.hyperpod` makes those.

The manifest is checked against KubeRay's CRD schema in the tests (``../shared/kuberay``).

One idea, the RayCluster as KubeRay's CRD sees it (written and read back); its length is the manifest's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_core.memory import MemoryEstimate, RankCapacity
    from skyrl_nb.cluster.kueue import QueueInfo

DEFAULT_IMAGE = "rayproject/ray:2.52.1-py311-gpu"
DEFAULT_RAY_VERSION = "2.52.1"
HEALTH_LABEL = "sagemaker.amazonaws.com/node-health-status"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
INSTANCE_GROUP_LABEL = "sagemaker.amazonaws.com/instance-group-name"
DASHBOARD_PORT = 8265
METRICS_PORT = 8080
#: The engine's step metrics for Prometheus on the head pod (``run.prometheus_port``; skyrl_engine/prometheus.py):
#: the head's pod annotations point scrapers at it.
ENGINE_METRICS_PORT = 9464
#: The HyperPod Ray Endpoint Operator's opt-in on a Ray resource (value ``"true"``): an authenticated public
#: dashboard endpoint, reached with ``sagemaker_ray://<name>/<namespace>``.
ENDPOINT_ANNOTATION = "access.sagemaker.amazonaws.com/enabled"


@dataclass(frozen=True)
class InstanceShape:
    """What one instance type offers a pod: GPUs, EFA interfaces, vCPUs and memory (GiB)."""

    gpus: int
    efa: int
    vcpus: int
    memory_gib: int

    def _repr_html_(self) -> str:
        return f"<code>{escape(repr(self))}</code>"


#: Instance types seen on HyperPod with their accelerator and network shape (AWS instance pages).
INSTANCE_TYPES: dict[str, InstanceShape] = {
    "ml.t3.xlarge": InstanceShape(0, 0, 4, 16),
    "ml.m5.xlarge": InstanceShape(0, 0, 4, 16),
    "ml.m5.2xlarge": InstanceShape(0, 0, 8, 32),
    "ml.m5.4xlarge": InstanceShape(0, 0, 16, 64),
    "ml.m5.12xlarge": InstanceShape(0, 0, 48, 192),
    "ml.c5.4xlarge": InstanceShape(0, 0, 16, 32),
    "ml.g5.xlarge": InstanceShape(1, 0, 4, 16),
    "ml.g5.2xlarge": InstanceShape(1, 0, 8, 32),
    "ml.g5.4xlarge": InstanceShape(1, 0, 16, 64),
    "ml.g5.8xlarge": InstanceShape(1, 1, 32, 128),
    "ml.g5.12xlarge": InstanceShape(4, 1, 48, 192),
    "ml.g5.16xlarge": InstanceShape(1, 1, 64, 256),
    "ml.g5.24xlarge": InstanceShape(4, 1, 96, 384),
    "ml.g5.48xlarge": InstanceShape(8, 1, 192, 768),
    "ml.g6.xlarge": InstanceShape(1, 0, 4, 16),
    "ml.g6.12xlarge": InstanceShape(4, 1, 48, 192),
    "ml.g6.48xlarge": InstanceShape(8, 1, 192, 768),
    "ml.g6e.xlarge": InstanceShape(1, 0, 4, 32),
    "ml.g6e.12xlarge": InstanceShape(4, 1, 48, 384),
    "ml.g6e.48xlarge": InstanceShape(8, 4, 192, 1536),
    "ml.p4d.24xlarge": InstanceShape(8, 4, 96, 1152),
    "ml.p4de.24xlarge": InstanceShape(8, 4, 96, 1152),
    "ml.p5.48xlarge": InstanceShape(8, 32, 192, 2048),
    "ml.p5e.48xlarge": InstanceShape(8, 32, 192, 2048),
    "ml.p5en.48xlarge": InstanceShape(8, 16, 192, 2048),
}


#: The GPU of each instance family, by Ray's ``accelerator_type`` name (its memory:
#: ``skyrl_core.memory.GPU_MEMORY_GIB``).
INSTANCE_ACCELERATORS: dict[str, str] = {
    "ml.g5": "A10G", "ml.g6": "L4", "ml.g6e": "L40S", "ml.p4d": "A100-40G", "ml.p4de": "A100-80G",
    "ml.p5": "H100", "ml.p5e": "H200", "ml.p5en": "H200",
}


def instance_accelerator(instance_type: str) -> str | None:
    """Ray's ``accelerator_type`` of ``instance_type``'s GPUs (``ml.g5.12xlarge`` → ``A10G``), None if unknown."""
    return INSTANCE_ACCELERATORS.get(instance_type.rpartition(".")[0])


def instance_shape(instance_type: str) -> InstanceShape:
    """The :class:`InstanceShape` of ``instance_type``; a clear error naming the known ones if unknown."""
    try:
        return INSTANCE_TYPES[instance_type]
    except KeyError:
        known = ", ".join(sorted(INSTANCE_TYPES))
        raise ValueError(
            f"instance type {instance_type!r} is not in skyrl-nb's table; pass gpus=/efa=/cpu=/memory= "
            f"explicitly on the WorkerGroup, or use one of: {known}"
        ) from None


def k8s_name(text: str) -> str:
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    return name[:40] or "group"


@dataclass
class WorkerGroup:
    """One KubeRay worker group: ``replicas`` pods of one instance type, one pod per node.

    ``gpus``/``efa``/``cpu``/``memory_gib`` default from :data:`INSTANCE_TYPES` (the pod takes the
    whole node, minus headroom for HyperPod's daemon sets). ``instance_group`` pins the pods to one
    HyperPod instance group when two groups share an instance type.
    """

    instance_type: str
    replicas: int = 1
    gpus: int | None = None
    name: str | None = None
    min_replicas: int = 0
    max_replicas: int | None = None
    efa: int | None = None
    cpu: int | None = None
    memory_gib: int | None = None
    instance_group: str | None = None

    def __post_init__(self) -> None:
        known = INSTANCE_TYPES.get(self.instance_type)
        if known is None and None in (self.gpus, self.cpu, self.memory_gib):
            instance_shape(self.instance_type)  # raises with the list of known types
        if known is not None:
            self.gpus = known.gpus if self.gpus is None else self.gpus
            self.efa = known.efa if self.efa is None else self.efa
            self.cpu = self.cpu or max(1, int(known.vcpus * 0.85))
            self.memory_gib = self.memory_gib or max(2, int(known.memory_gib * 0.85))
        self.efa = self.efa or 0
        self.name = self.name or k8s_name(self.instance_type.removeprefix("ml.").replace(".", "-"))
        self.max_replicas = max(self.replicas, self.max_replicas or self.replicas)
        if self.replicas < 0 or self.min_replicas < 0:
            raise ValueError(f"worker group {self.name!r}: replicas must be >= 0, got {self.replicas}")
        if known is not None and self.gpus is not None and self.gpus > known.gpus:
            raise ValueError(
                f"worker group {self.name!r}: {self.instance_type} has {known.gpus} GPUs, asked for {self.gpus}"
            )

    @classmethod
    def coerce(cls, value: WorkerGroup | dict[str, Any] | tuple[Any, ...] | str) -> WorkerGroup:
        """Accept a WorkerGroup, a dict of its fields, ``(instance_type, replicas[, gpus])`` or a type."""
        if isinstance(value, WorkerGroup):
            return value
        if isinstance(value, dict):
            return cls(**value)
        if isinstance(value, str):
            return cls(value)
        return cls(*value)

    def __repr__(self) -> str:
        return (f"WorkerGroup({self.name!r}, {self.instance_type}, replicas={self.replicas}, "
                f"gpus={self.gpus}, efa={self.efa})")

    def _repr_html_(self) -> str:
        return f"<code>{escape(repr(self))}</code>"


# --------------------------------------------------------------------------- manifest


def _ray_version(image: str) -> str:
    m = re.search(r":(\d+\.\d+\.\d+)", image)
    return m.group(1) if m else DEFAULT_RAY_VERSION


def build_manifest(
    name: str,
    namespace: str,
    workers: Sequence[WorkerGroup],
    *,
    image: str = DEFAULT_IMAGE,
    fsx_claim: str | None = None,
    fsx_mount: str = "/fsx",
    auth: bool = True,
    head_cpu: int = 4,
    head_memory_gib: int = 16,
    head_instance_type: str | None = None,
    env: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    engine_metrics_port: int | None = ENGINE_METRICS_PORT,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The KubeRay ``RayCluster`` (``ray.io/v1``) for a head without GPUs and ``workers``.

    ``labels`` go on the RayCluster and on its head and worker pod templates (Kueue's queue and priority
    labels must be in all three places); ``annotations`` on the RayCluster alone (the HyperPod Ray Endpoint
    Operator's opt-in, :data:`ENDPOINT_ANNOTATION`).

    The head pod (where a job's driver, and so the engine's Prometheus endpoint, runs) carries the
    ``prometheus.io/scrape``, ``/port`` and ``/path`` annotations for ``engine_metrics_port`` (None: none),
    which annotation-based scrapers (a Prometheus ``kubernetes_sd`` pod job, as HyperPod's observability
    collector runs) follow."""
    env_list = [{"name": k, "value": v} for k, v in sorted((env or {}).items())]
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    if fsx_claim:
        volumes.append({"name": "fsx", "persistentVolumeClaim": {"claimName": fsx_claim}})
        mounts.append({"name": "fsx", "mountPath": fsx_mount})
    pre_stop = {"preStop": {"exec": {"command": ["/bin/sh", "-c", "ray stop"]}}}
    common_labels = {"app.kubernetes.io/managed-by": "skyrl-nb", **(labels or {})}

    head_selector = {HEALTH_LABEL: "Schedulable"}
    if head_instance_type:
        head_selector[INSTANCE_TYPE_LABEL] = head_instance_type
    head_resources = {"cpu": str(head_cpu), "memory": f"{head_memory_gib}Gi"}
    head_container: dict[str, Any] = {
        "name": "ray-head",
        "image": image,
        "resources": {"requests": dict(head_resources), "limits": dict(head_resources)},
        "ports": [
            {"containerPort": 6379, "name": "gcs-server"},
            {"containerPort": DASHBOARD_PORT, "name": "dashboard"},
            {"containerPort": 10001, "name": "client"},
            {"containerPort": METRICS_PORT, "name": "metrics"},
            *([{"containerPort": engine_metrics_port, "name": "engine-metrics"}] if engine_metrics_port else []),
        ],
        "lifecycle": pre_stop,
    }
    if mounts:
        head_container["volumeMounts"] = list(mounts)
    if env_list:
        head_container["env"] = list(env_list)
    head_pod: dict[str, Any] = {"containers": [head_container], "nodeSelector": head_selector}
    if volumes:
        head_pod["volumes"] = list(volumes)

    groups = []
    for g in workers:
        limits: dict[str, Any] = {"cpu": str(g.cpu), "memory": f"{g.memory_gib}Gi"}
        if g.gpus:
            limits["nvidia.com/gpu"] = g.gpus
        if g.efa:
            limits["vpc.amazonaws.com/efa"] = g.efa
        selector = {HEALTH_LABEL: "Schedulable", INSTANCE_TYPE_LABEL: g.instance_type}
        if g.instance_group:
            selector[INSTANCE_GROUP_LABEL] = g.instance_group
        container: dict[str, Any] = {
            "name": "ray-worker",
            "image": image,
            "resources": {"requests": dict(limits), "limits": dict(limits)},
            "ports": [{"containerPort": METRICS_PORT, "name": "metrics"}],
            "lifecycle": pre_stop,
            # NCCL needs more shared memory than the container default of 64 MiB.
            "volumeMounts": [*mounts, {"name": "dshm", "mountPath": "/dev/shm"}],
        }
        if env_list:
            container["env"] = list(env_list)
        pod: dict[str, Any] = {
            "containers": [container],
            "nodeSelector": selector,
            "volumes": [*volumes, {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }
        if g.gpus:
            pod["tolerations"] = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        groups.append({
            "groupName": g.name,
            "replicas": g.replicas,
            "minReplicas": g.min_replicas,
            "maxReplicas": g.max_replicas,
            "rayStartParams": {"metrics-export-port": str(METRICS_PORT), "num-gpus": str(g.gpus or 0)},
            "template": {"metadata": {"labels": dict(common_labels)}, "spec": pod},
        })

    spec: dict[str, Any] = {
        "rayVersion": _ray_version(image),
        "headGroupSpec": {
            "rayStartParams": {
                "dashboard-host": "0.0.0.0",
                "metrics-export-port": str(METRICS_PORT),
                "num-gpus": "0",
            },
            "template": {"metadata": {"labels": dict(common_labels), **({"annotations": {
                "prometheus.io/scrape": "true", "prometheus.io/port": str(engine_metrics_port),
                "prometheus.io/path": "/metrics"}} if engine_metrics_port else {})}, "spec": head_pod},
        },
        "workerGroupSpecs": groups,
    }
    if auth:
        spec["authOptions"] = {"mode": "token"}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(common_labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": metadata, "spec": spec}


@dataclass
class ClusterPlan:
    """What ``HyperPodRayCluster.up`` would create: the manifest and where pods would land; with a job
    config, each training rank's memory estimate (``memory``) and what one rank has there (``capacity``)."""

    manifest: dict[str, Any]
    placement: list[dict[str, Any]]
    warnings: list[str]
    memory: MemoryEstimate | None = None
    capacity: RankCapacity | None = None
    queue: QueueInfo | None = None

    def to_yaml(self) -> str:
        """The RayCluster manifest as YAML (``kubectl apply -f`` ready)."""
        import yaml

        return yaml.safe_dump(self.manifest, sort_keys=False)

    def summary(self) -> str:
        """A few lines a person reads before creating the cluster."""
        m = self.manifest
        lines = [f"RayCluster {m['metadata']['namespace']}/{m['metadata']['name']} "
                 f"(ray {m['spec']['rayVersion']}, auth {m['spec'].get('authOptions', {}).get('mode', 'disabled')}, "
                 f"dashboard {'endpoint' if ENDPOINT_ANNOTATION in m['metadata'].get('annotations', {}) else 'port-forward'})"]
        if self.queue is not None:
            lines.append(f"  {self.queue.summary()}")
        for p in self.placement:
            avail = "?" if p["healthy_nodes"] is None else p["healthy_nodes"]
            lines.append(f"  {p['group']:<16} {p['instance_type']:<18} x{p['replicas']}  "
                         f"{p['gpus_per_pod']} GPU/pod  EFA {p['efa']}  healthy nodes: {avail}")
        if self.memory is not None:
            lines.append(f"  memory per rank: {self.memory.summary()}")
            lines.append(f"  one rank has: {self.capacity!r}" if self.capacity else "  one rank has: unknown")
        lines += [f"  ! {w}" for w in self.warnings]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def _repr_html_(self) -> str:
        return f"<pre>{escape(self.summary())}</pre>"


# --------------------------------------------------------------------------- RayCluster status


@dataclass
class PodInfo:
    """One Ray pod: name, role (head / worker group), phase, readiness, GPUs, and why it waits."""

    name: str
    group: str
    phase: str
    ready: bool
    gpus: int = 0
    node: str | None = None
    reason: str | None = None

    @classmethod
    def from_pod(cls, pod: dict[str, Any]) -> PodInfo:
        meta, spec, st = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
        labels = meta.get("labels", {})
        group = "head" if labels.get("ray.io/node-type") == "head" else labels.get("ray.io/group", "worker")
        conds = {c.get("type"): c for c in st.get("conditions", [])}
        ready = conds.get("Ready", {}).get("status") == "True"
        gpus = sum(int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0) or 0)
                   for c in spec.get("containers", []))
        reason = None
        sched = conds.get("PodScheduled", {})
        if sched.get("status") == "False":
            reason = f"{sched.get('reason', 'Unschedulable')}: {sched.get('message', '')}".strip(": ")
        for cs in st.get("containerStatuses", []):
            waiting = cs.get("state", {}).get("waiting")
            if waiting:
                reason = f"{waiting.get('reason', '')}: {waiting.get('message', '')}".strip(": ")
        return cls(name=meta.get("name", "?"), group=group, phase=st.get("phase", "Unknown"), ready=ready,
                   gpus=gpus, node=spec.get("nodeName"), reason=reason)

    def _repr_html_(self) -> str:
        return f"<code>{escape(repr(self))}</code>"


@dataclass
class RayClusterStatus:
    """A RayCluster's state as KubeRay reports it, with its pods."""

    name: str
    namespace: str
    state: str
    reason: str | None
    desired_workers: int
    ready_workers: int
    desired_gpus: int
    conditions: list[dict[str, Any]]
    pods: list[PodInfo]
    groups: dict[str, int]
    endpoints: dict[str, str] = field(default_factory=dict)
    suspended: bool = False

    @classmethod
    def from_objects(cls, rc: dict[str, Any], pods: Iterable[dict[str, Any]]) -> RayClusterStatus:
        st = rc.get("status", {}) or {}
        spec = rc.get("spec", {})
        return cls(
            name=rc["metadata"]["name"], namespace=rc["metadata"].get("namespace", "default"),
            state=st.get("state", "") or "", reason=st.get("reason"),
            desired_workers=int(st.get("desiredWorkerReplicas", 0) or 0),
            ready_workers=int(st.get("readyWorkerReplicas", 0) or 0),
            desired_gpus=int(float(str(st.get("desiredGPU", 0) or 0))),
            conditions=list(st.get("conditions", [])),
            pods=sorted((PodInfo.from_pod(p) for p in pods), key=lambda p: (p.group != "head", p.name)),
            groups={g["groupName"]: int(g.get("replicas", 0)) for g in spec.get("workerGroupSpecs", [])},
            endpoints=dict(st.get("endpoints", {}) or {}),
            suspended=bool(spec.get("suspend")) or st.get("state") == "suspended",
        )

    @property
    def ready(self) -> bool:
        """``status.state == "ready"``."""
        return self.state == "ready"

    @property
    def head(self) -> PodInfo | None:
        """The head pod, when it exists."""
        return next((p for p in self.pods if p.group == "head"), None)

    def stuck(self) -> str:
        """The condition holding the cluster back, in words (first False condition, failing pods)."""
        parts = []
        for c in self.conditions:
            bad = (c.get("status") == "True") if c.get("type") == "RayClusterReplicaFailure" else (
                c.get("status") != "True" and c.get("type") in ("HeadPodReady", "RayClusterProvisioned"))
            if bad:
                parts.append(f"condition {c.get('type')}={c.get('status')} (reason {c.get('reason')}: "
                             f"{c.get('message', '')})")
        for p in self.pods:
            if not p.ready:
                parts.append(f"pod {p.name} {p.phase}" + (f" - {p.reason}" if p.reason else ""))
        if self.suspended:
            parts.insert(0, "suspended (spec.suspend: a queue such as Kueue has not admitted it)")
        if not parts:
            parts.append(f"state {self.state or '(none yet)'}"
                         + (f" - {self.reason}" if self.reason else ""))
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Plain data for widgets."""
        return {
            "name": self.name, "namespace": self.namespace, "state": self.state or "pending",  # not a run state: the RayCluster's
            "ready_workers": self.ready_workers, "desired_workers": self.desired_workers,
            "gpus": self.desired_gpus, "groups": dict(self.groups),
            "pods": [p.__dict__ for p in self.pods],
        }

    def __repr__(self) -> str:
        return (f"RayClusterStatus({self.namespace}/{self.name}: state={self.state or 'pending'!r}, "  # not a run state: the RayCluster's
                f"workers {self.ready_workers}/{self.desired_workers} ready, GPUs={self.desired_gpus}, "
                f"pods={len(self.pods)})")

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{escape(p.name)}</td><td>{escape(p.group)}</td><td>{escape(p.phase)}</td>"
            f"<td>{'✔' if p.ready else '…'}</td><td>{p.gpus}</td><td>{escape(p.reason or '')}</td></tr>"
            for p in self.pods
        )
        return (f"<b>RayCluster {escape(self.namespace)}/{escape(self.name)}</b>: "
                f"<code>{escape(self.state or 'pending')}</code>, workers {self.ready_workers}/"  # not a run state: the RayCluster's
                f"{self.desired_workers} ready, {self.desired_gpus} GPUs<table><tr><th>pod</th><th>group</th>"
                f"<th>phase</th><th>ready</th><th>GPUs</th><th>waiting on</th></tr>{rows}</table>")


@dataclass
class RayClusterSummary:
    """One row of ``list_hyperpod``: a RayCluster's name, state, workers and GPUs."""

    name: str
    namespace: str
    state: str
    ready_workers: int
    desired_workers: int
    gpus: int
    created: str

    @classmethod
    def from_object(cls, rc: dict[str, Any], namespace: str = "default") -> RayClusterSummary:
        """The summary of one RayCluster object as the API server lists it."""
        st = rc.get("status", {}) or {}
        return cls(name=rc["metadata"]["name"], namespace=rc["metadata"].get("namespace", namespace),
                   state=st.get("state", "") or "", ready_workers=int(st.get("readyWorkerReplicas", 0) or 0),
                   desired_workers=int(st.get("desiredWorkerReplicas", 0) or 0),
                   gpus=int(float(str(st.get("desiredGPU", 0) or 0))),
                   created=rc["metadata"].get("creationTimestamp", ""))

    def __repr__(self) -> str:
        return (f"RayClusterSummary({self.namespace}/{self.name}: {self.state or 'pending'}, "  # not a run state: the RayCluster's
                f"workers {self.ready_workers}/{self.desired_workers}, GPUs {self.gpus})")

    def _repr_html_(self) -> str:
        return f"<code>{escape(repr(self))}</code>"
