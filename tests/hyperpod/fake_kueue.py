"""The fake Kubernetes API with Kueue (HyperPod task governance) on it, for tests.

:class:`FakeKueueKubernetes` adds to :class:`fake_k8s.FakeKubernetes`:

- ``/apis/kueue.x-k8s.io/v1beta1/namespaces/{ns}/localqueues`` (list), ``.../clusterqueues/{name}`` and
  ``.../workloadpriorityclasses`` (cluster-scoped), from :meth:`add_queue` / :meth:`add_priority_class`;
- ``/api/v1/namespaces/{ns}/events`` (list, ``fieldSelector`` on ``involvedObject.kind`` / ``.name``);
- Kueue's RayCluster integration: a RayCluster created with the queue label in a namespace that has that
  LocalQueue starts with ``spec.suspend: true`` and a ``CreatedWorkload`` event; ``admit_after`` reads later
  Kueue decides: a cluster whose GPUs fit the ClusterQueue's ``nvidia.com/gpu`` quota is admitted (``suspend``
  false, ``QuotaReserved``/``Admitted`` on its Workload, ``Started`` on it), one that does not stays
  suspended with a ``Pending`` event on its Workload, in Kueue's words. While suspended, KubeRay makes no pods
  and reports ``state: suspended``.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

from fake_k8s import FakeKubernetes, _now, status_failure

KUEUE = ["apis", "kueue.x-k8s.io", "v1beta1"]
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


class FakeKueueKubernetes(FakeKubernetes):
    """The fake API server and operator, with Kueue's queues, events and admission."""

    def __init__(self, *, admit_after: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.admit_after = admit_after
        self.events: list[dict[str, Any]] = []
        self._workloads: dict[tuple[str, str], str] = {}  # (ns, raycluster) -> Workload name
        self._seen: dict[tuple[str, str], int] = {}

    # -- knobs
    def add_queue(self, ns: str, name: str, cluster_queue: str, quota: dict[str, dict[str, Any]]) -> None:
        """A LocalQueue ``ns/name`` pointing at ClusterQueue ``cluster_queue`` with ``{flavor: {resource: n}}``."""
        self.objects[("localqueues", ns, name)] = {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": ns}, "spec": {"clusterQueue": cluster_queue},
            "status": {"pendingWorkloads": 0, "admittedWorkloads": 0, "reservingWorkloads": 0}}
        self.objects[("clusterqueues", "", cluster_queue)] = {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": cluster_queue},
            "spec": {"namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": sorted({r for res in quota.values() for r in res}),
                "flavors": [{"name": flavor, "resources": [{"name": r, "nominalQuota": q} for r, q in res.items()]}
                            for flavor, res in quota.items()]}]}}

    def add_priority_class(self, name: str, value: int) -> None:
        """A Kueue WorkloadPriorityClass."""
        self.objects[("workloadpriorityclasses", "", name)] = {
            "apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "WorkloadPriorityClass",
            "metadata": {"name": name}, "value": value}

    def _event(self, ns: str, kind: str, name: str, reason: str, message: str, etype: str = "Normal") -> None:
        self.events.append({
            "apiVersion": "v1", "kind": "Event", "type": etype, "reason": reason, "message": message,
            "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": ns, "creationTimestamp": _now()},
            "involvedObject": {"kind": kind, "name": name, "namespace": ns,
                               "apiVersion": "ray.io/v1" if kind == "RayCluster" else "kueue.x-k8s.io/v1beta1"},
            "firstTimestamp": _now(), "lastTimestamp": _now(), "count": 1,
            "source": {"component": "kueue-admission" if kind == "Workload" else "kueue-raycluster-controller"}})

    # -- Kueue's part of a reconcile
    def reconcile(self, ns: str, name: str) -> None:
        with self.lock:
            rc = self.objects.get(("rayclusters", ns, name))
            if rc is None:
                return
            key = (ns, name)
            if key in self._workloads and rc["spec"].get("suspend"):
                self._seen[key] = self._seen.get(key, 0) + 1
                if self._seen[key] == self.admit_after:
                    self._decide(ns, name, rc)
            if rc["spec"].get("suspend"):  # KubeRay keeps a suspended cluster at zero pods
                rc["status"] = {"state": "suspended", "desiredWorkerReplicas": 0, "readyWorkerReplicas": 0,
                                "conditions": [{"type": "RayClusterSuspended", "status": "True",
                                                "reason": "RayClusterSuspended", "message": "",
                                                "lastTransitionTime": _now()}]}
                return
        super().reconcile(ns, name)

    def _decide(self, ns: str, name: str, rc: dict[str, Any]) -> None:
        workload = self._workloads[(ns, name)]
        queue = self.objects[("localqueues", ns, rc["metadata"]["labels"][QUEUE_LABEL])]
        cq = self.objects[("clusterqueues", "", queue["spec"]["clusterQueue"])]
        flavors = cq["spec"]["resourceGroups"][0]["flavors"]
        quota = sum(int(r["nominalQuota"]) for f in flavors for r in f["resources"] if r["name"] == "nvidia.com/gpu")
        groups = rc["spec"].get("workerGroupSpecs", [])
        asks = sum(int(g.get("replicas", 0)) * int(g["template"]["spec"]["containers"][0]["resources"]["limits"].get(
            "nvidia.com/gpu", 0)) for g in groups)
        if asks <= quota:
            rc["spec"]["suspend"] = False
            self._event(ns, "Workload", workload, "QuotaReserved", f"Quota reserved in ClusterQueue {cq['metadata']['name']}")
            self._event(ns, "Workload", workload, "Admitted", f"Admitted by ClusterQueue {cq['metadata']['name']}")
            self._event(ns, "RayCluster", name, "Started", f"Admitted by clusterQueue {cq['metadata']['name']}")
            queue["status"]["admittedWorkloads"] += 1
        else:
            group = next((g["groupName"] for g in groups if g["template"]["spec"]["containers"][0]["resources"][
                "limits"].get("nvidia.com/gpu")), "head")
            self._event(ns, "Workload", workload, "Pending",
                        f"couldn't assign flavors to pod set {group}: insufficient quota for nvidia.com/gpu in flavor "
                        f"{flavors[0]['name']}, {asks - quota} more needed")
            queue["status"]["pendingWorkloads"] += 1

    # -- requests
    def handle(self, method: str, path: str, query: dict[str, str], body: Any, ctype: str) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if parts[:3] == KUEUE:
            return self._kueue(method, parts[3:])
        if parts[:2] == ["api", "v1"] and len(parts) == 5 and parts[2] == "namespaces" and parts[4] == "events":
            return 200, {"apiVersion": "v1", "kind": "EventList", "metadata": {},
                         "items": [copy.deepcopy(e) for e in self.events if e["metadata"]["namespace"] == parts[3]
                                   and _fields(e, query.get("fieldSelector"))]}
        code, obj = super().handle(method, path, query, body, ctype)
        if method == "POST" and code == 201 and parts[-1] == "rayclusters":
            self._admit_or_queue(parts[4], obj)
        return code, obj

    def _admit_or_queue(self, ns: str, obj: dict[str, Any]) -> None:
        """Kueue's webhook: a RayCluster bound for a LocalQueue here starts suspended, with a Workload."""
        queue = (obj["metadata"].get("labels") or {}).get(QUEUE_LABEL)
        if not queue or ("localqueues", ns, queue) not in self.objects:
            return
        name = obj["metadata"]["name"]
        stored = self.objects[("rayclusters", ns, name)]
        stored["spec"]["suspend"] = True
        workload = f"raycluster-{name}-{secrets.token_hex(3)[:5]}"
        self._workloads[(ns, name)] = workload
        self._event(ns, "RayCluster", name, "CreatedWorkload", f"Created Workload: {ns}/{workload}")

    def _kueue(self, method: str, rest: list[str]) -> tuple[int, Any]:
        if method != "GET":
            return 405, status_failure(405, "MethodNotAllowed", method)
        if len(rest) == 3 and rest[0] == "namespaces" and rest[2] == "localqueues":
            kind, ns, name = "localqueues", rest[1], None
        elif len(rest) in (1, 2) and rest[0] in ("clusterqueues", "workloadpriorityclasses"):
            kind, ns, name = rest[0], "", rest[1] if len(rest) == 2 else None
        else:
            return 404, status_failure(404, "NotFound", "the server could not find the requested resource")
        if ("get" if name else "list", kind) in self.forbidden:
            return 403, status_failure(403, "Forbidden", f'{kind}.kueue.x-k8s.io is forbidden: User cannot '
                                       f'{"get" if name else "list"} resource "{kind}" in API group "kueue.x-k8s.io"')
        if name:
            obj = self.objects.get((kind, ns, name))
            return (200, copy.deepcopy(obj)) if obj else (404, status_failure(404, "NotFound", f'{kind} "{name}" not found'))
        return 200, {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "List", "metadata": {},
                     "items": [copy.deepcopy(o) for k, o in sorted(self.objects.items()) if k[:2] == (kind, ns)]}


def _fields(event: dict[str, Any], selector: str | None) -> bool:
    """Whether ``event`` matches a ``fieldSelector`` of ``involvedObject.<field>=<value>`` terms."""
    for term in (selector or "").split(","):
        if term:
            key, _, value = term.partition("=")
            if str(event["involvedObject"].get(key.removeprefix("involvedObject."))) != value:
                return False
    return True
