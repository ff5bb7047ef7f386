"""Kueue (HyperPod task governance) as a RayCluster meets it: which LocalQueue a namespace offers, what quota
stands behind it, the labels that put a RayCluster in it, and why Kueue holds one back.

On a governed HyperPod namespace a RayCluster is a Kueue workload: it needs ``kueue.x-k8s.io/queue-name`` on
the RayCluster *and* on its head and worker pod templates (``kueue.x-k8s.io/priority-class`` too, for a
priority), Kueue admits the head and all workers together against the queue's quota, and until then the
RayCluster sits with ``spec.suspend: true``; only a Kubernetes event says why. Everything here reads through
a :class:`~skyrl_nb.cluster.kube.KubeClient`; nothing is written.

>>> queue_labels("hyperpod-ns-team-a-localqueue", "training-priority")
{'kueue.x-k8s.io/queue-name': 'hyperpod-ns-team-a-localqueue', 'kueue.x-k8s.io/priority-class': 'training-priority'}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_nb.cluster.kube import KubeClient

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta1"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: Event reasons that say a workload is on its way, not held (Kueue's and KubeRay's own words).
_ROUTINE = {"CreatedWorkload", "UpdatedWorkload", "QuotaReserved", "Admitted", "Started", "Resumed", "Created",
            "Scheduled", "Pulling", "Pulled"}
_ADMITTED = {"QuotaReserved", "Admitted", "Started", "Resumed"}
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def check_label_value(key: str, value: str) -> str:
    """``value`` when it is a valid Kubernetes label value; a one-line ValueError naming ``key`` otherwise."""
    if not _LABEL_VALUE.match(value):
        raise ValueError(f"{key}={value!r} is not a Kubernetes label value: at most 63 letters, digits, '-', '_' "
                         "or '.', starting and ending with a letter or digit")
    return value


def queue_labels(queue: str | None, priority: str | None = None) -> dict[str, str]:
    """The labels that put a RayCluster (and, given to both pod templates, its pods) in ``queue`` at ``priority``."""
    out = {QUEUE_LABEL: queue} if queue else {}
    if priority:
        out[PRIORITY_LABEL] = priority
    return out


@dataclass
class QueueInfo:
    """A Kueue LocalQueue a RayCluster can go to, with the quota of its ClusterQueue when readable.

    ``quota`` maps each resource flavor to ``{resource: nominalQuota}``; ``borrowing`` the same for
    ``borrowingLimit`` where one is set; ``quota_note`` says why the quota is unknown (the ClusterQueue is
    cluster-scoped, and a namespace-scoped access entry cannot read it)."""

    name: str
    namespace: str
    cluster_queue: str | None = None
    quota: dict[str, dict[str, str]] = field(default_factory=dict)
    borrowing: dict[str, dict[str, str]] = field(default_factory=dict)
    quota_note: str | None = None
    pending: int | None = None
    admitted: int | None = None
    others: list[str] = field(default_factory=list)

    def gpu_quota(self) -> float | None:
        """The queue's nominal ``nvidia.com/gpu`` over all its flavors (None when the quota is unknown)."""
        if not self.quota:
            return None
        return sum(_quantity(r.get("nvidia.com/gpu", "0")) for r in self.quota.values())

    def summary(self) -> str:
        """One line: the queue, its ClusterQueue and quota per flavor, its pending and admitted workloads."""
        line = f"queue {self.namespace}/{self.name}"
        if self.cluster_queue:
            line += f" -> ClusterQueue {self.cluster_queue}"
        if self.quota:
            parts = []
            for flavor, resources in self.quota.items():
                have = ", ".join(f"{k} {v}" + (f" (+{self.borrowing[flavor][k]} borrowable)"
                                                 if k in self.borrowing.get(flavor, {}) else "")
                                 for k, v in resources.items())
                parts.append(f"{flavor}: {have}")
            line += ": quota " + "; ".join(parts)
        elif self.quota_note:
            line += f": quota unknown ({self.quota_note})"
        if self.pending is not None or self.admitted is not None:
            line += f"; workloads pending {self.pending or 0}, admitted {self.admitted or 0}"
        return line

    def __repr__(self) -> str:
        return f"QueueInfo({self.summary()})"

    def _repr_html_(self) -> str:
        return f"<code>{escape(self.summary())}</code>"


def _quantity(value: Any) -> float:
    """A Kubernetes quantity as a number (``8``, ``500m``, ``64Gi``), for comparing GPU counts."""
    text = str(value).strip()
    units = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * units[suffix]
    try:
        return float(text)
    except ValueError:
        return 0.0


def local_queues(kube: KubeClient, namespace: str) -> list[dict[str, Any]] | None:
    """The LocalQueues in ``namespace`` (``[]``: Kueue runs but this namespace has none), or None when Kueue's
    API is not installed on the cluster (HTTP 404). A 403 is raised: it says what to grant."""
    from skyrl_nb.cluster.kube import KubeNotFound

    try:
        return list(kube.get(f"{KUEUE_API}/namespaces/{namespace}/localqueues").get("items", []))
    except KubeNotFound:
        return None


def find_queue(kube: KubeClient, namespace: str, wanted: str | None = None) -> QueueInfo | None:
    """The LocalQueue a RayCluster in ``namespace`` goes to: ``wanted`` if given, else the namespace's only one
    (HyperPod task governance makes one per team namespace); None when the namespace is not governed.

    ``wanted`` that is not a LocalQueue there, or several queues and none chosen, raise a one-line ValueError
    naming the queues there."""
    items = local_queues(kube, namespace)
    names = sorted(q["metadata"]["name"] for q in items or [])
    if wanted:
        if items is None:
            raise ValueError(f"queue={wanted!r}: Kueue is not installed on this cluster (no LocalQueue API); "
                             "leave queue unset")
        if wanted not in names:
            raise ValueError(f"queue={wanted!r} is not a Kueue LocalQueue in namespace {namespace!r}; it has: "
                             f"{', '.join(names) or 'none'}")
        chosen = wanted
    elif not names:
        return None
    elif len(names) > 1:
        raise ValueError(f"namespace {namespace!r} has several Kueue LocalQueues ({', '.join(names)}): pass "
                         "queue=<one of them>")
    else:
        chosen = names[0]
    obj = next(q for q in items or [] if q["metadata"]["name"] == chosen)
    status = obj.get("status") or {}
    info = QueueInfo(name=chosen, namespace=namespace, cluster_queue=(obj.get("spec") or {}).get("clusterQueue"),
                     pending=status.get("pendingWorkloads"), admitted=status.get("admittedWorkloads"),
                     others=[n for n in names if n != chosen])
    if info.cluster_queue:
        _read_quota(kube, info)
    return info


def _read_quota(kube: KubeClient, info: QueueInfo) -> None:
    from skyrl_nb.cluster.kube import KubeError

    try:
        cq = kube.get(f"{KUEUE_API}/clusterqueues/{info.cluster_queue}")
    except KubeError as err:  # a namespace-scoped access entry may not read the cluster-scoped ClusterQueue
        info.quota_note = f"ClusterQueue {info.cluster_queue} not readable: HTTP {err.status}"
        return
    for group in (cq.get("spec") or {}).get("resourceGroups", []):
        for flavor in group.get("flavors", []):
            for resource in flavor.get("resources", []):
                info.quota.setdefault(flavor["name"], {})[resource["name"]] = str(resource.get("nominalQuota", 0))
                if resource.get("borrowingLimit") is not None:
                    info.borrowing.setdefault(flavor["name"], {})[resource["name"]] = str(resource["borrowingLimit"])


def priority_classes(kube: KubeClient) -> list[str] | None:
    """The names of Kueue's WorkloadPriorityClasses, or None when they cannot be read."""
    from skyrl_nb.cluster.kube import KubeError

    try:
        return sorted(p["metadata"]["name"] for p in kube.get(f"{KUEUE_API}/workloadpriorityclasses").get("items", []))
    except KubeError:
        return None


def is_suspended(raycluster: dict[str, Any]) -> bool:
    """Whether the RayCluster is suspended (``spec.suspend``, state ``suspended``, or KubeRay's condition)."""
    status = raycluster.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions", [])}
    return bool((raycluster.get("spec") or {}).get("suspend")) or status.get("state") == "suspended" or \
        conditions.get("RayClusterSuspended") == "True"


def _event_time(event: dict[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or
               (event.get("metadata") or {}).get("creationTimestamp") or "")


def held_reason(kube: KubeClient, namespace: str, raycluster: dict[str, Any]) -> str | None:
    """Why Kueue holds ``raycluster`` back, as ``"<reason>: <message>"`` from the newest event about it or its
    Workload (Kueue names it ``raycluster-<name>-<hash>``); None while it is not suspended, or when the newest
    word is an admission (Kueue suspends every new RayCluster for the moment before it admits it)."""
    if not is_suspended(raycluster):
        return None
    name = raycluster["metadata"]["name"]
    path = f"/api/v1/namespaces/{namespace}/events"
    events = kube.get(path, fieldSelector=f"involvedObject.kind=RayCluster,involvedObject.name={name}").get("items", [])
    workloads = kube.get(path, fieldSelector="involvedObject.kind=Workload").get("items", [])
    events += [e for e in workloads if str((e.get("involvedObject") or {}).get("name", "")).startswith(
        f"raycluster-{name}-")]
    events.sort(key=_event_time)
    for event in reversed(events):
        reason = event.get("reason") or ""
        if reason in _ADMITTED:
            return None
        if reason not in _ROUTINE:
            return f"{reason}: {event.get('message', '')}".rstrip(": ")
    return None
