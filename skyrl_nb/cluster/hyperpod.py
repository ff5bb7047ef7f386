"""Ray clusters on SageMaker HyperPod (EKS orchestration) through KubeRay.

>>> import skyrl_nb
>>> rc = skyrl_nb.cluster.hyperpod("my-hyperpod", workers=[("ml.g5.12xlarge", 2)])   # doctest: +SKIP
>>> rc.plan()            # the RayCluster manifest and placement, nothing touched      # doctest: +SKIP
>>> rc.up()              # create the RayCluster, wait for state == ready             # doctest: +SKIP
>>> cluster = rc.connect()   # port-forward (or the Ray endpoint) -> skyrl_nb Cluster    # doctest: +SKIP
>>> rc.scale("g5-12xlarge", 4); rc.status(); rc.delete()                              # doctest: +SKIP

The manifest and the status types live in :mod:`skyrl_nb.cluster.kuberay`. The HyperPod cluster is
found with boto3 (``sagemaker.describe_cluster`` / ``list_cluster_nodes``);
the EKS endpoint and CA come from ``eks.describe_cluster``; Kubernetes is reached with
:mod:`skyrl_nb.cluster.kube` (EKS bearer token, no kubectl).

One idea, a KubeRay cluster's life on HyperPod (plan, up, connect, down); boto3's part lives in hyperpod_aws.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from html import escape
from typing import TYPE_CHECKING, Any

from skyrl_nb.cluster.hyperpod_aws import (
    ClusterNotReady,
    ClusterQueued,
    HyperPodError,
    HyperPodInfo,
    connect_sagemaker_ray,
    describe_hyperpod,
    parse_sagemaker_ray_address,
    resize_instance_group,
)
from skyrl_nb.cluster.kube import ApiPaths, KubeClient, KubeConflict, KubeNotFound, PortForward
from skyrl_nb.cluster.kuberay import (
    DASHBOARD_PORT,
    DEFAULT_IMAGE,
    ENDPOINT_ANNOTATION,
    INSTANCE_TYPE_LABEL,
    ClusterPlan,
    RayClusterStatus,
    RayClusterSummary,
    WorkerGroup,
    build_manifest,
    instance_accelerator,
    k8s_name,
)

if TYPE_CHECKING:
    from skyrl_core.memory import MemoryEstimate, RankCapacity
    from skyrl_nb.cluster.kueue import QueueInfo

log = logging.getLogger(__name__)

#: The uid of skyrl-nb's Grafana dashboard (docs/grafana/skyrl-nb.json).
GRAFANA_DASHBOARD = "skyrl-nb"
#: How ``connect()`` reaches the head's dashboard: a port-forward through the API server, or the HyperPod Ray
#: Endpoint Operator's endpoint (``sagemaker_ray://``; needs the Spaces add-on and a domain, docs/hyperpod.md).
DASHBOARD_ACCESS = ("port-forward", "endpoint")

# what this module offered before its boto3 part got a module of its own (hyperpod_aws)
__all__ = ["GRAFANA_DASHBOARD", "ClusterNotReady", "ClusterPlan", "ClusterQueued", "HyperPodError", "HyperPodInfo", "HyperPodRayCluster",
           "Progress", "RayClusterSummary", "connect_sagemaker_ray", "describe_hyperpod", "hyperpod", "list_hyperpod",
           "log", "parse_sagemaker_ray_address", "resize_instance_group"]


# --------------------------------------------------------------------------- the cluster object


Progress = Callable[[RayClusterStatus, float], None]


def _print_progress(status: RayClusterStatus, elapsed: float) -> None:
    print(f"[{elapsed:5.0f}s] {status.name}: {status.state or 'pending'}, "  # not a run state: the RayCluster's
          f"workers {status.ready_workers}/{status.desired_workers} ready", flush=True)


class HyperPodRayCluster:
    """A KubeRay RayCluster on a SageMaker HyperPod (EKS) cluster, managed from the notebook.

    Make one with :func:`hyperpod`. ``kube`` (a :class:`~skyrl_nb.cluster.kube.KubeClient`) and
    ``info`` (a :class:`HyperPodInfo`) are looked up lazily with boto3 unless given.
    """

    def __init__(
        self,
        hyperpod_cluster: str,
        *,
        namespace: str = "default",
        name: str | None = None,
        workers: Sequence[WorkerGroup | dict[str, Any] | tuple[Any, ...] | str] = ("ml.g5.xlarge",),
        image: str = DEFAULT_IMAGE,
        fsx_claim: str | None = None,
        fsx_mount: str = "/fsx",
        auth: bool = True,
        head_instance_type: str | None = None,
        env: dict[str, str] | None = None,
        region: str | None = None,
        session: Any = None,
        kube: KubeClient | None = None,
        info: HyperPodInfo | None = None,
        queue: str | None = None,
        priority: str | None = None,
        dashboard: str = "port-forward",
    ) -> None:
        from skyrl_nb.cluster.kueue import check_label_value

        if dashboard not in DASHBOARD_ACCESS:
            raise ValueError(f"dashboard={dashboard!r} is not one of: {', '.join(DASHBOARD_ACCESS)}")
        self.queue = None if queue is None else (queue and check_label_value("queue", queue))
        self.priority = priority and check_label_value("priority", priority)
        self.dashboard = dashboard
        self._queue_info: QueueInfo | None = None
        self.hyperpod_cluster = hyperpod_cluster
        self.namespace = namespace
        self.name = name or k8s_name(f"skyrl-{hyperpod_cluster}")
        self.workers = [WorkerGroup.coerce(w) for w in workers]
        names = [w.name for w in self.workers]
        if len(set(names)) != len(names):
            raise ValueError(f"worker group names must differ, got {names}; pass name= on each WorkerGroup")
        self.image = image
        self.fsx_claim = fsx_claim
        self.fsx_mount = fsx_mount
        self.auth = auth
        self.head_instance_type = head_instance_type
        self.env = dict(env or {})
        self.region = region
        self._session = session
        self._kube = kube
        self._info = info
        self._forwards: list[PortForward] = []
        self.cluster: Any = None
        self.paths = ApiPaths(namespace)

    # -- lookups
    @property
    def session(self) -> Any:
        """The boto3 session (made on first use)."""
        if self._session is None:
            import boto3

            self._session = boto3.Session(region_name=self.region)
        return self._session

    def info(self, refresh: bool = False) -> HyperPodInfo:
        """The HyperPod cluster (boto3 ``describe_cluster`` + ``list_cluster_nodes``)."""
        if self._info is None or refresh:
            self._info = describe_hyperpod(self.hyperpod_cluster, region=self.region, session=self.session)
        return self._info

    @property
    def kube(self) -> KubeClient:
        """The Kubernetes client for the HyperPod cluster's EKS cluster (EKS token auth)."""
        if self._kube is None:
            from skyrl_nb.cluster.kube import eks_kube_client

            info = self.info()
            assert info.eks_cluster_arn
            self._kube = eks_kube_client(info.eks_cluster_arn, region=info.region, session=self.session)
        return self._kube

    # -- plan
    def manifest(self) -> dict[str, Any]:
        """The RayCluster manifest; touches nothing. Kueue's queue label goes on the RayCluster and both pod
        templates for ``queue=`` or the LocalQueue :meth:`find_queue` found (``plan``/``up`` look it up)."""
        from skyrl_nb.cluster.kueue import queue_labels

        queue = self.queue if self.queue is not None else (self._queue_info.name if self._queue_info else None)
        return build_manifest(
            self.name, self.namespace, self.workers, image=self.image, fsx_claim=self.fsx_claim,
            fsx_mount=self.fsx_mount, auth=self.auth, head_instance_type=self.head_instance_type, env=self.env,
            labels=queue_labels(queue, self.priority),
            annotations={ENDPOINT_ANNOTATION: "true"} if self.dashboard == "endpoint" else None,
        )

    def find_queue(self) -> QueueInfo | None:
        """The Kueue LocalQueue this RayCluster goes to (``queue=``, else the namespace's only one) with its
        quota, or None when the namespace is not governed (``queue=""``: never). Asks the Kubernetes API."""
        from skyrl_nb.cluster.kube import KubeForbidden
        from skyrl_nb.cluster.kueue import find_queue

        if self.queue == "":
            return None
        try:
            self._queue_info = find_queue(self.kube, self.namespace, self.queue)
        except KubeForbidden:
            log.warning("cannot list Kueue LocalQueues in namespace %s (403): if it is governed by HyperPod task "
                        "governance, pass queue=<its LocalQueue>", self.namespace)
            self._queue_info = None
        return self._queue_info

    def plan(self, check_capacity: bool = False, config: Any = None) -> ClusterPlan:
        """The manifest plus placement; with ``check_capacity`` (or when HyperPod info is already
        known) compare each group with the healthy nodes of its instance type.

        With ``config`` (a preset name, YAML path, dict or JobConfig) the plan also shows each training
        rank's memory estimate against the worker groups' GPUs (``skyrl_core.memory``); a config that
        is invalid or cannot fit is refused with :class:`~skyrl_core.config.ConfigError`, one line per
        problem naming its keys.

        >>> hyperpod("hp", workers=[("ml.g5.12xlarge", 1)]).plan(config="quickstart").capacity
        RankCapacity(GPU 24.0 GiB, host 163.0 GiB per rank (A10G))
        """
        info = self.info() if check_capacity else self._info
        placement, warnings = [], []
        wanted: dict[str, int] = {}
        for g in self.workers:
            wanted[g.instance_type] = wanted.get(g.instance_type, 0) + g.replicas
        for g in self.workers:
            healthy = info.healthy_nodes(g.instance_type) if info else None
            placement.append({"group": g.name, "instance_type": g.instance_type, "replicas": g.replicas,
                              "gpus_per_pod": g.gpus, "efa": g.efa, "healthy_nodes": healthy})
        if info:
            for itype, n in wanted.items():
                have = info.healthy_nodes(itype)
                if have < n:
                    warnings.append(f"{n} pods want {itype} nodes but HyperPod cluster {info.name!r} has "
                                    f"{have} healthy; the rest will stay Pending")
        if self.fsx_claim is None:
            warnings.append("no fsx_claim: the pods share no disk with this notebook; give run.run_root="
                            "s3://<bucket>/<prefix> (in Studio the default is SageMaker's default bucket)")
        if self._kube is not None or check_capacity:
            warnings += self._queue_warnings(self.find_queue())
        plan = ClusterPlan(self.manifest(), placement, warnings, queue=self._queue_info)
        if config is not None:
            plan.memory, plan.capacity = self.memory_plan(config)
        return plan

    def _queue_warnings(self, queue: QueueInfo | None) -> list[str]:
        from skyrl_nb.cluster.kueue import priority_classes

        if queue is None:
            return [f"priority={self.priority!r} has no effect: namespace {self.namespace!r} has no Kueue "
                    "LocalQueue"] if self.priority else []
        out = []
        asks = sum((w.gpus or 0) * w.replicas for w in self.workers)
        have = queue.gpu_quota()
        if have is not None and asks > have:
            out.append(f"this RayCluster asks {asks} GPUs and Kueue admits it whole: queue {queue.name!r} has a "
                       f"nominal quota of {have:g} (it waits for borrowable quota, or forever)")
        known = priority_classes(self.kube) if self.priority else None
        if known is not None and self.priority not in known:
            out.append(f"priority={self.priority!r} is not a Kueue WorkloadPriorityClass here; known: "
                       f"{', '.join(known) or 'none'}")
        return out

    def memory_plan(self, config: Any) -> tuple[MemoryEstimate, RankCapacity | None]:
        """``config``'s per-rank memory estimate and a rank's capacity on these worker groups; raises
        ConfigError when the config is invalid or the estimate cannot fit (an unknown size refuses nothing)."""
        from skyrl_core.config import ConfigError, check_config
        from skyrl_core.memory import capacity_from_nodes, rank_memory

        cfg = check_config(config)
        memory = rank_memory(cfg)
        nodes = []
        for g in self.workers:  # a pod takes a node: its GPUs and its memory limit
            accelerator = instance_accelerator(g.instance_type) if g.gpus else None
            nodes.append({"GPU": float(g.gpus or 0), "memory": float((g.memory_gib or 0) * 2**30),
                          **({f"accelerator_type:{accelerator}": float(g.gpus or 0)} if accelerator else {})})
        capacity = capacity_from_nodes(nodes, cfg.trainer.placement.policy_num_gpus_per_node)
        problems = memory.problems(capacity)
        if problems:
            raise ConfigError(problems)
        return memory, capacity

    # -- lifecycle
    def up(self, wait: bool = True, timeout: float = 900.0, poll_s: float = 5.0,
           progress: Progress | None = _print_progress, queued: bool = False) -> RayClusterStatus:
        """Create the RayCluster (an existing one of the same name is kept), then wait for ready; in a namespace
        governed by Kueue it carries the queue label, and one Kueue holds back raises :class:`ClusterQueued`
        with the event's reason at once (``queued=True``: wait for admission instead; see :meth:`wait_ready`)."""
        if self._info is not None or self._kube is None:
            warnings = self.plan(check_capacity=self._kube is None).warnings  # looks up the Kueue queue too
        else:  # a given Kubernetes client and no HyperPod info: only the Kueue queue is looked up
            warnings = self._queue_warnings(self.find_queue())
        for w in warnings:
            log.warning(w)
        try:
            self.kube.create(self.paths.rayclusters(), self.manifest())
            log.info("created RayCluster %s/%s", self.namespace, self.name)
        except KubeConflict:
            existing = {g["groupName"]: (g.get("replicas"), g["template"]["spec"].get("nodeSelector", {}).get(
                INSTANCE_TYPE_LABEL)) for g in self.raw()["spec"].get("workerGroupSpecs", [])}
            wanted = {w.name: (w.replicas, w.instance_type) for w in self.workers}
            if existing != wanted:
                log.warning("RayCluster %s/%s exists with other worker groups %s (asked for %s); reusing it "
                            "unchanged: scale() it, or delete() and up() again", self.namespace, self.name,
                            existing, wanted)
            else:
                log.info("RayCluster %s/%s exists already; reusing it", self.namespace, self.name)
        return self.wait_ready(timeout=timeout, poll_s=poll_s, progress=progress, queued=queued) if wait \
            else self.status()

    def raw(self) -> dict[str, Any]:
        """The RayCluster object as the API server returns it."""
        return self.kube.get(self.paths.rayclusters(self.name))

    def status(self, raw: dict[str, Any] | None = None) -> RayClusterStatus:
        """KubeRay's status of this RayCluster (``raw``: the object already read) with its head and worker pods."""
        rc = raw if raw is not None else self.raw()
        pods = self.kube.get(self.paths.pods(), labelSelector=f"ray.io/cluster={self.name}").get("items", [])
        return RayClusterStatus.from_objects(rc, pods)

    def wait_ready(self, timeout: float = 900.0, poll_s: float = 5.0,
                   progress: Progress | None = _print_progress, queued: bool = False) -> RayClusterStatus:
        """Poll until ``status.state == "ready"``; on timeout raise :class:`ClusterNotReady` naming
        the stuck condition (and the pods waiting, with the scheduler's reason). A RayCluster Kueue holds back
        (suspended, with an event saying why) raises :class:`ClusterQueued` with that reason on the first poll
        that sees it, unless ``queued`` (then it waits for admission, up to ``timeout``)."""
        from skyrl_nb.cluster.kueue import held_reason

        start = time.monotonic()
        last_line = None
        while True:
            raw = self.raw()
            st = self.status(raw)
            held = held_reason(self.kube, self.namespace, raw) if st.suspended else None
            if held and not queued:
                queue = raw["metadata"].get("labels", {}).get("kueue.x-k8s.io/queue-name", "?")
                raise ClusterQueued(
                    f"RayCluster {self.namespace}/{self.name} is held by Kueue in queue {queue!r} (suspended, not "
                    f"admitted): {held}; it starts once admitted: rc.wait_ready(queued=True) waits, rc.delete() "
                    "withdraws it", reason=held, status=st)
            elapsed = time.monotonic() - start
            line = (st.state, st.ready_workers, st.desired_workers)
            if progress and line != last_line:
                progress(st, elapsed)
                last_line = line
            if st.ready:
                return st
            if st.state == "failed":  # not a run state: the RayCluster's
                raise ClusterNotReady(f"RayCluster {self.namespace}/{self.name} failed: {st.stuck()}",
                                      stuck=st.stuck(), status=st)
            if elapsed + poll_s > timeout:
                stuck = (f"held by Kueue: {held}; " if held else "") + st.stuck()
                raise ClusterNotReady(
                    f"RayCluster {self.namespace}/{self.name} not ready after {elapsed:.0f}s "
                    f"(state {st.state or 'pending'!r}, workers {st.ready_workers}/{st.desired_workers}): "  # not a run state: the RayCluster's
                    f"{stuck}", stuck=stuck, status=st)
            time.sleep(poll_s)

    def scale(self, group: str, replicas: int) -> RayClusterStatus:
        """Set a worker group's replicas (raising maxReplicas / lowering minReplicas to fit)."""
        rc = self.raw()
        groups = rc["spec"].get("workerGroupSpecs", [])
        index = next((i for i, g in enumerate(groups) if g["groupName"] == group), None)
        if index is None:
            raise ValueError(f"RayCluster {self.name!r} has no worker group {group!r}; it has: "
                             f"{', '.join(g['groupName'] for g in groups)}")
        if replicas < 0:
            raise ValueError(f"replicas must be >= 0, got {replicas}")
        g = groups[index]
        path = f"/spec/workerGroupSpecs/{index}"
        ops: list[dict[str, Any]] = [{"op": "test", "path": f"{path}/groupName", "value": group},
                                     {"op": "replace", "path": f"{path}/replicas", "value": replicas}]
        if replicas > int(g.get("maxReplicas", replicas)):
            ops.append({"op": "replace", "path": f"{path}/maxReplicas", "value": replicas})
        if replicas < int(g.get("minReplicas", 0)):
            ops.append({"op": "replace", "path": f"{path}/minReplicas", "value": replicas})
        if self._info is not None:
            itype = g["template"]["spec"].get("nodeSelector", {}).get(INSTANCE_TYPE_LABEL)
            if itype and self._info.healthy_nodes(itype) < replicas:
                log.warning("%s asks %d %s nodes; HyperPod has %d healthy", group, replicas, itype,
                            self._info.healthy_nodes(itype))
        self.kube.json_patch(self.paths.rayclusters(self.name), ops)
        for w in self.workers:
            if w.name == group:
                w.replicas = replicas
                w.max_replicas = max(w.max_replicas or 0, replicas)
        return self.status()

    def resize_nodes(self, instance_group: str, count: int) -> str:
        """Change the HyperPod instance group's node count (``sagemaker.update_cluster``), e.g. before
        scaling a worker group past the healthy nodes. Returns the cluster ARN; nodes join over minutes."""
        arn = resize_instance_group(self.hyperpod_cluster, instance_group, count, region=self.region,
                                    session=self.session)
        self._info = None
        return arn

    def delete(self, wait: bool = False, timeout: float = 300.0, poll_s: float = 2.0) -> None:
        """Close tunnels and delete the RayCluster (KubeRay removes its pods, service and secret)."""
        self.disconnect()
        try:
            self.kube.delete(self.paths.rayclusters(self.name))
        except KubeNotFound:
            log.info("RayCluster %s/%s was already gone", self.namespace, self.name)
            return
        deadline = time.monotonic() + timeout
        while wait:
            try:
                self.raw()
            except KubeNotFound:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"RayCluster {self.namespace}/{self.name} still exists after {timeout:.0f}s")
            time.sleep(poll_s)

    # -- access
    def head_pod(self) -> str:
        """The name of the running head pod."""
        pods = self.kube.get(self.paths.pods(),
                             labelSelector=f"ray.io/cluster={self.name},ray.io/node-type=head").get("items", [])
        running = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
        if not running:
            raise RuntimeError(f"RayCluster {self.namespace}/{self.name} has no running head pod "
                               f"({len(pods)} head pods found); check rc.status()")
        return running[0]["metadata"]["name"]

    def token(self) -> str | None:
        """The Ray auth token from the Secret KubeRay made for ``authOptions`` (None without auth)."""
        import base64

        spec = self.raw()["spec"]
        auth = spec.get("authOptions") or {}
        if auth.get("mode") != "token":
            return None
        secret_name = auth.get("secretName") or self.name
        try:
            secret = self.kube.get(self.paths.secret(secret_name))
        except KubeNotFound:
            raise RuntimeError(f"KubeRay has not created the auth Secret {self.namespace}/{secret_name} yet; "
                               "wait for the cluster to be ready (rc.wait_ready())") from None
        return base64.b64decode(secret["data"]["auth_token"]).decode().strip()

    def forward(self, port: int = DASHBOARD_PORT, local_port: int = 0) -> PortForward:
        """Forward a local port to ``port`` on the head pod through the API server."""
        pf = PortForward(self.kube, self.namespace, self.head_pod(), port, local_port=local_port,
                         find_pod=self.head_pod)
        self._forwards.append(pf)
        return pf

    def forward_service(self, service: str, namespace: str, port: int, local_port: int = 0) -> PortForward:
        """Forward to a Service's pod (like ``kubectl port-forward svc/...``), e.g. Grafana."""
        paths = ApiPaths(namespace)
        svc = self.kube.get(paths.services(service))
        target = port
        for p in svc["spec"].get("ports", []):
            if p.get("port") == port and isinstance(p.get("targetPort"), int):
                target = p["targetPort"]
        selector = ",".join(f"{k}={v}" for k, v in svc["spec"].get("selector", {}).items())
        pods = [p for p in self.kube.get(paths.pods(), labelSelector=selector).get("items", [])
                if p.get("status", {}).get("phase") == "Running"]
        if not pods:
            raise RuntimeError(f"Service {namespace}/{service} has no running pod behind it")
        pf = PortForward(self.kube, namespace, pods[0]["metadata"]["name"], target, local_port=local_port)
        self._forwards.append(pf)
        return pf

    def grafana(self, service: str = "prometheus-grafana", namespace: str = "monitoring",
                port: int = 80, dashboard: str | None = GRAFANA_DASHBOARD, run_id: str | None = None) -> str:
        """Forward to Grafana and return the URL of skyrl-nb's dashboard there (``docs/grafana/skyrl-nb.json``,
        imported once; ``run_id`` picks a run), through Studio's proxy inside Studio; ``dashboard=None``:
        Grafana's own root."""
        from urllib.parse import quote

        from skyrl_nb import studio

        pf = self.forward_service(service, namespace, port)
        base = (studio.proxy_url(pf.local_port) or pf.address).rstrip("/")
        if dashboard is None:
            return base
        return f"{base}/d/{dashboard}/{dashboard}" + (f"?var-run_id={quote(run_id)}" if run_id else "")

    def connect(self, wait: bool = True, timeout: float = 900.0) -> Any:
        """Port-forward to the head's dashboard and return a ``HyperPodCluster`` (a
        :class:`skyrl_nb.cluster.base.Cluster`) on it, with the Ray token from KubeRay's Secret: the
        same Cluster/Job API as a local cluster. ``cluster.shutdown()`` closes the tunnel.

        With ``dashboard="endpoint"`` the cluster is ``sagemaker_ray://<name>/<namespace>`` instead: the Ray
        Endpoint Operator's endpoint through AWS's toolkit (`hyperpod_connect.connect_endpoint`), no tunnel."""
        from skyrl_nb import studio
        from skyrl_nb.cluster.hyperpod_connect import connect_endpoint, hyperpod_cluster_class

        if wait:
            self.wait_ready(timeout=timeout, progress=None)
        if self.dashboard == "endpoint":
            self.cluster = connect_endpoint(self)
            return self.cluster
        token = self.token()
        pf = self.forward(DASHBOARD_PORT)
        dashboard_url = studio.proxy_url(pf.local_port) or pf.address
        cluster = hyperpod_cluster_class()(pf.address, token=token, dashboard_url=dashboard_url, name=self.name)
        cluster.port_forward = pf
        cluster.raycluster = self
        self.cluster = cluster
        return cluster

    def disconnect(self) -> None:
        """Close every port-forward this object opened."""
        for pf in self._forwards:
            pf.close()
        self._forwards.clear()

    def snapshot(self) -> dict[str, Any]:
        """Plain data for the cluster panel: HyperPod info, RayCluster state, dashboard link."""
        out: dict[str, Any] = {"hyperpod": self._info.to_dict() if self._info else None,
                               "raycluster": None, "dashboard_url": None,
                               "name": self.name, "namespace": self.namespace,
                               "groups": {w.name: w.replicas for w in self.workers}}
        try:
            out["raycluster"] = self.status().to_dict()
        except KubeNotFound:
            pass
        if self.cluster is not None:
            out["dashboard_url"] = self.cluster.dashboard_url
        return out

    def panel(self) -> Any:
        """The cluster panel widget (HyperPod groups and health, RayCluster state, Up/Scale/Down)."""
        from skyrl_widgets.cluster_panel import ClusterPanel

        return ClusterPanel(
            self.snapshot(),
            on_up=lambda: self.up(progress=None) and self.snapshot(),
            on_scale=lambda group, n: self.scale(group, n) and self.snapshot(),
            on_down=lambda: (self.delete(), self.snapshot())[1],
            on_refresh=self.snapshot,
        )

    def __repr__(self) -> str:
        groups = ", ".join(f"{w.name}: {w.replicas} x {w.instance_type}" for w in self.workers)
        return (f"HyperPodRayCluster({self.namespace}/{self.name} on HyperPod {self.hyperpod_cluster!r}, "
                f"workers=[{groups}], auth={'token' if self.auth else 'disabled'}, dashboard={self.dashboard}"
                + (f", queue={self.queue or self._queue_info.name!r}" if self.queue or self._queue_info else "") + ")")

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{escape(str(w.name))}</td><td>{escape(w.instance_type)}</td>"
                       f"<td>{w.replicas}</td><td>{w.gpus}</td><td>{w.efa}</td></tr>" for w in self.workers)
        link = (f' · <a href="{escape(self.cluster.dashboard_url)}" target="_blank">Ray dashboard</a>'
                if self.cluster is not None else "")
        return (f"<b>RayCluster {escape(self.namespace)}/{escape(self.name)}</b> on HyperPod "
                f"<code>{escape(self.hyperpod_cluster)}</code>{link}<table><tr><th>group</th><th>type</th>"
                f"<th>replicas</th><th>GPUs/pod</th><th>EFA</th></tr>{rows}</table>")


# --------------------------------------------------------------------------- entry points


def hyperpod(hyperpod_cluster: str, **kwargs: Any) -> HyperPodRayCluster:
    """A :class:`HyperPodRayCluster` handle; nothing is created until ``.up()``.

    Keywords are the class's: ``namespace``, ``name``, ``workers``, ``image``, ``fsx_claim``,
    ``fsx_mount``, ``auth``, ``head_instance_type``, ``env``, ``region``, ``session``, ``kube``, ``info``,
    ``queue`` (a Kueue LocalQueue; None: the namespace's only one, if governed; ``""``: none), ``priority`` (a
    Kueue WorkloadPriorityClass, e.g. ``training-priority``) and ``dashboard`` (``port-forward`` or ``endpoint``).
    ``workers`` lists worker groups as :class:`WorkerGroup`, dicts, ``(instance_type, replicas[, gpus])``
    or bare instance types.

    >>> rc = hyperpod("hp", workers=[("ml.g5.12xlarge", 2)])
    >>> rc.manifest()["spec"]["workerGroupSpecs"][0]["replicas"]
    2
    """
    return HyperPodRayCluster(hyperpod_cluster, **kwargs)


def list_hyperpod(hyperpod_cluster: str | None = None, namespace: str = "default", *,
                  region: str | None = None, session: Any = None,
                  kube: KubeClient | None = None) -> list[RayClusterSummary]:
    """The RayClusters in ``namespace`` of a HyperPod cluster's EKS cluster."""
    if kube is None:
        if hyperpod_cluster is None:
            raise ValueError("list_hyperpod needs the HyperPod cluster name (or kube=)")
        kube = HyperPodRayCluster(hyperpod_cluster, namespace=namespace, region=region, session=session).kube
    return [RayClusterSummary.from_object(rc, namespace)
            for rc in kube.get(ApiPaths(namespace).rayclusters()).get("items", [])]


