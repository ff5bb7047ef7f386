"""SageMaker HyperPod through boto3: a cluster's description (its EKS cluster, instance groups, nodes), resizing an
instance group, and the ``sagemaker_ray://`` address of AWS's Ray toolkit; errors as one line each."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from skyrl_nb.cluster.kuberay import (
    INSTANCE_TYPES,
    InstanceShape,
    RayClusterStatus,
)

if TYPE_CHECKING:
    pass

log = logging.getLogger(__name__)

#: The uid of skyrl-nb's Grafana dashboard (docs/grafana/skyrl-nb.json).


class HyperPodError(RuntimeError):
    """The HyperPod cluster is missing, not EKS-orchestrated, or not InService."""


class ClusterNotReady(TimeoutError):
    """``wait_ready`` ran out of time; ``stuck`` names the condition that held it up."""

    def __init__(self, message: str, *, stuck: str, status: RayClusterStatus | None = None):
        super().__init__(message)
        self.stuck = stuck
        self.status = status


class ClusterQueued(ClusterNotReady):
    """Kueue (HyperPod task governance) holds the RayCluster back, suspended and not admitted; ``reason`` is
    the Kubernetes event's reason and message. The RayCluster stays queued until it is admitted or deleted."""

    def __init__(self, message: str, *, reason: str, status: RayClusterStatus | None = None):
        super().__init__(message, stuck=reason, status=status)
        self.reason = reason


@dataclass
class HyperPodInfo:
    """What boto3 says about a HyperPod cluster: status, EKS cluster, instance groups, node health."""

    name: str
    arn: str
    status: str
    eks_cluster_arn: str | None
    region: str
    instance_groups: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def eks_cluster_name(self) -> str | None:
        """The EKS cluster name (last part of its ARN)."""
        return self.eks_cluster_arn.rsplit("/", 1)[-1] if self.eks_cluster_arn else None

    def healthy_nodes(self, instance_type: str | None = None) -> int:
        """Nodes whose HyperPod status is Running (of ``instance_type`` when given)."""
        return sum(
            1 for n in self.nodes
            if n.get("InstanceStatus", {}).get("Status") == "Running"
            and (instance_type is None or n.get("InstanceType") == instance_type)
        )

    def node_health(self) -> dict[str, dict[str, int]]:
        """``{instance_group: {status: count}}`` from ``list_cluster_nodes``."""
        out: dict[str, dict[str, int]] = {}
        for n in self.nodes:
            group = out.setdefault(n.get("InstanceGroupName", "?"), {})
            st = n.get("InstanceStatus", {}).get("Status", "?")
            group[st] = group.get(st, 0) + 1
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain data for widgets."""
        return {
            "name": self.name, "status": self.status, "region": self.region,
            "eks_cluster": self.eks_cluster_name,
            "instance_groups": [
                {"name": g.get("InstanceGroupName"), "instance_type": g.get("InstanceType"),
                 "current": g.get("CurrentCount"), "target": g.get("TargetCount"),
                 "gpus_per_node": INSTANCE_TYPES.get(g.get("InstanceType", ""), InstanceShape(0, 0, 0, 0)).gpus}
                for g in self.instance_groups
            ],
            "node_health": self.node_health(),
        }

    def __repr__(self) -> str:
        groups = ", ".join(f"{g.get('InstanceGroupName')}: {g.get('CurrentCount')} x {g.get('InstanceType')}"
                           for g in self.instance_groups)
        return (f"HyperPodInfo({self.name!r}, {self.status}, eks={self.eks_cluster_name!r}, "
                f"groups=[{groups}], healthy_nodes={self.healthy_nodes()}/{len(self.nodes)})")

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{escape(str(g['name']))}</td><td>{escape(str(g['instance_type']))}</td>"
            f"<td>{g['current']}/{g['target']}</td><td>{g['gpus_per_node']}</td>"
            f"<td>{escape(', '.join(f'{k}: {v}' for k, v in self.node_health().get(g['name'], {}).items()))}</td></tr>"
            for g in self.to_dict()["instance_groups"]
        )
        return (f"<b>HyperPod {escape(self.name)}</b> ({escape(self.status)}, EKS "
                f"{escape(str(self.eks_cluster_name))})<table><tr><th>group</th><th>type</th>"
                f"<th>nodes</th><th>GPUs/node</th><th>health</th></tr>{rows}</table>")


def describe_hyperpod(name: str, *, region: str | None = None, session: Any = None,
                      require_eks: bool = True, require_in_service: bool = True) -> HyperPodInfo:
    """Look up a HyperPod cluster and its nodes; a clear :class:`HyperPodError` when it cannot host KubeRay."""
    import boto3
    from botocore.exceptions import ClientError

    session = session or boto3.Session(region_name=region)
    region = region or session.region_name
    sm = session.client("sagemaker", region_name=region)
    try:
        desc = sm.describe_cluster(ClusterName=name)
    except ClientError as e:
        if e.response.get("Error", {}).get("Code") in ("ResourceNotFound", "ValidationException"):
            raise HyperPodError(
                f"No HyperPod cluster named {name!r} in {region}: {e.response['Error'].get('Message', '')}"
            ) from None
        raise
    eks_arn = (desc.get("Orchestrator") or {}).get("Eks", {}).get("ClusterArn")
    status = desc.get("ClusterStatus", "?")
    if require_eks and not eks_arn:
        kind = "Slurm" if (desc.get("Orchestrator") or {}).get("Slurm") else "Slurm (no Orchestrator.Eks)"
        raise HyperPodError(
            f"HyperPod cluster {name!r} is orchestrated by {kind}, not Amazon EKS; KubeRay needs an "
            "EKS-orchestrated HyperPod cluster (create one with Orchestrator={'Eks': {'ClusterArn': ...}})."
        )
    if require_in_service and status != "InService":
        extra = f": {desc['FailureMessage']}" if desc.get("FailureMessage") else ""
        raise HyperPodError(f"HyperPod cluster {name!r} is {status}, not InService{extra}.")
    nodes: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {"ClusterName": name}
    while True:
        page = sm.list_cluster_nodes(**kwargs)
        nodes.extend(page.get("ClusterNodeSummaries", []))
        if not page.get("NextToken"):
            break
        kwargs["NextToken"] = page["NextToken"]
    return HyperPodInfo(name=name, arn=desc.get("ClusterArn", ""), status=status, eks_cluster_arn=eks_arn,
                        region=region or "", instance_groups=list(desc.get("InstanceGroups", [])), nodes=nodes)


def resize_instance_group(name: str, instance_group: str, count: int, *, region: str | None = None,
                          session: Any = None) -> str:
    """Set a HyperPod instance group's node count with ``sagemaker.update_cluster``; returns the ARN.

    The request repeats the group's type, lifecycle config and role from ``describe_cluster``, which
    UpdateCluster requires alongside the new ``InstanceCount``.
    """
    import boto3

    session = session or boto3.Session(region_name=region)
    sm = session.client("sagemaker", region_name=region or session.region_name)
    desc = sm.describe_cluster(ClusterName=name)
    groups = {g["InstanceGroupName"]: g for g in desc.get("InstanceGroups", [])}
    if instance_group not in groups:
        raise HyperPodError(f"HyperPod cluster {name!r} has no instance group {instance_group!r}; "
                            f"it has: {', '.join(groups) or 'none'}")
    g = groups[instance_group]
    spec: dict[str, Any] = {"InstanceGroupName": instance_group, "InstanceCount": count,
                            "InstanceType": g["InstanceType"], "ExecutionRole": g["ExecutionRole"]}
    for key in ("LifeCycleConfig", "ThreadsPerCore", "InstanceStorageConfigs", "OnStartDeepHealthChecks"):
        if g.get(key) is not None:
            spec[key] = g[key]
    return sm.update_cluster(ClusterName=name, InstanceGroups=[spec])["ClusterArn"]


def parse_sagemaker_ray_address(address: str) -> tuple[str, str]:
    """``sagemaker_ray://<cluster>/<namespace>`` -> ``(cluster, namespace)``."""
    m = re.match(r"^sagemaker_ray://([^/]+)/([^/]+)/?$", address.strip())
    if not m:
        raise ValueError(f"{address!r} is not a sagemaker_ray://<cluster>/<namespace> address")
    return m.group(1), m.group(2)


def require_sagemaker_ray(address: str) -> None:
    """Check ``address`` is ``sagemaker_ray://<cluster>/<namespace>`` and AWS's toolkit that serves it is
    installed; a one-line error saying what to install (or to port-forward instead) otherwise."""
    import importlib.metadata

    parse_sagemaker_ray_address(address)
    try:
        importlib.metadata.distribution("toolkit-for-ray-on-sagemaker-ai")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(
            f"{address!r} needs AWS's Ray-on-SageMaker toolkit: pip install toolkit-for-ray-on-sagemaker-ai "
            "(preinstalled in SageMaker Distribution images), or port-forward instead with "
            "skyrl_nb.cluster.hyperpod(<cluster>, namespace=<namespace>).connect()"
        ) from None


def connect_sagemaker_ray(address: str, verify: bool | str = True) -> Any:
    """A :class:`~skyrl_nb.cluster.base.Cluster` on a ``sagemaker_ray://<cluster>/<namespace>`` address.

    The address scheme belongs to AWS's ``toolkit-for-ray-on-sagemaker-ai`` package, which registers it
    with Ray's job client (it authenticates through the HyperPod Ray endpoint operator). Without the
    package, use ``hyperpod(cluster, namespace=...).connect()`` (a port-forward) instead.
    """
    require_sagemaker_ray(address)
    from skyrl_nb.cluster.base import Cluster

    # the toolkit's scheme reaches Ray's job client unchanged: it imports `sagemaker_ray`, which fetches a
    # bootstrap token through the EKS API (a RayDashboardConnection) and trades it for a session cookie
    return Cluster(address, name=address, dashboard_url=address, verify=verify)
