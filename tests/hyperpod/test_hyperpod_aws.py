"""boto3 calls: moto where it implements them, botocore's Stubber (checks every request against the
real service model) where moto falls short (Orchestrator fields, update_cluster)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from botocore.stub import Stubber
from hyperpod_common import REGION

from skyrl_nb.cluster.hyperpod import (
    HyperPodError,
    HyperPodRayCluster,
    describe_hyperpod,
    resize_instance_group,
)

ACCOUNT = "123456789012"
ROLE = f"arn:aws:iam::{ACCOUNT}:role/HyperPodExecution"
EKS_ARN = f"arn:aws:eks:{REGION}:{ACCOUNT}:cluster/hp-eks"
HP_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/abc123def456"
LIFECYCLE = {"SourceS3Uri": "s3://sagemaker-hp-lifecycle/scripts/", "OnCreate": "on_create.sh"}


def _group(name: str, itype: str, count: int) -> dict[str, Any]:
    return {"InstanceGroupName": name, "InstanceType": itype, "CurrentCount": count, "TargetCount": count,
            "LifeCycleConfig": LIFECYCLE, "ExecutionRole": ROLE, "ThreadsPerCore": 1}


def _describe(status: str = "InService", orchestrator: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ClusterArn": HP_ARN, "ClusterName": "hp", "ClusterStatus": status,
        "CreationTime": dt.datetime(2026, 11, 1, tzinfo=dt.UTC),
        "InstanceGroups": [_group("controller", "ml.m5.2xlarge", 1), _group("gpu", "ml.g5.12xlarge", 3)],
        "VpcConfig": {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]},
    }
    if orchestrator:
        out["Orchestrator"] = {"Eks": {"ClusterArn": EKS_ARN}}
    return out


def _node(i: int, group: str, itype: str, status: str = "Running") -> dict[str, Any]:
    return {"InstanceGroupName": group, "InstanceId": f"i-0{i:016x}", "InstanceType": itype,
            "LaunchTime": dt.datetime(2026, 11, 1, tzinfo=dt.UTC), "InstanceStatus": {"Status": status}}


def test_moto_cluster_without_orchestrator_is_refused_clearly(boto_session: Any) -> None:
    """moto drops Orchestrator, so a moto cluster looks like a Slurm one: the error must say so."""
    from moto import mock_aws

    with mock_aws():
        sm = boto_session.client("sagemaker", region_name=REGION)
        sm.create_cluster(ClusterName="hp-slurm", InstanceGroups=[{
            "InstanceGroupName": "gpu", "InstanceType": "ml.g5.12xlarge", "InstanceCount": 2,
            "LifeCycleConfig": LIFECYCLE, "ExecutionRole": ROLE, "ThreadsPerCore": 1}])
        with pytest.raises(HyperPodError, match="not Amazon EKS"):
            describe_hyperpod("hp-slurm", region=REGION, session=boto_session)
        # Without the EKS requirement, moto's cluster and its nodes come through.
        info = describe_hyperpod("hp-slurm", region=REGION, session=boto_session, require_eks=False,
                                 require_in_service=False)
        assert info.instance_groups[0]["InstanceType"] == "ml.g5.12xlarge"
        assert len(info.nodes) == 2 and all(n["InstanceType"] == "ml.g5.12xlarge" for n in info.nodes)
        with pytest.raises(HyperPodError, match="No HyperPod cluster named 'missing'"):
            describe_hyperpod("missing", region=REGION, session=boto_session)


def test_moto_eks_endpoint_and_ca_feed_the_kube_client(boto_session: Any) -> None:
    from moto import mock_aws

    from skyrl_nb.cluster.kube import EksTokenSource, eks_kube_client

    with mock_aws():
        eks = boto_session.client("eks", region_name=REGION)
        eks.create_cluster(name="hp-eks", roleArn=ROLE,
                           resourcesVpcConfig={"subnetIds": ["subnet-0123456789abcdef0"]})
        moto_cluster = eks.describe_cluster(name="hp-eks")["cluster"]
        try:
            kube = eks_kube_client(EKS_ARN, region=REGION, session=boto_session)
        except Exception as e:  # moto's CA data is not a real certificate; the client must still load it
            pytest.fail(f"eks_kube_client failed on moto's describe_cluster: {e}")
    assert kube.server == moto_cluster["endpoint"].rstrip("/")
    assert kube.eks_cluster == "hp-eks" and isinstance(kube._token, EksTokenSource)
    assert kube.bearer().startswith("k8s-aws-v1.")
    assert "k8s-aws-v1" not in repr(kube) and "redacted" in repr(kube)
    # moto's CA data is random bytes, not a certificate: the first request says so instead of crashing.
    with pytest.raises(ValueError, match="not a base64 PEM certificate"):
        kube.ssl_context  # noqa: B018


def test_stubbed_eks_orchestrated_cluster_and_paginated_nodes(boto_session: Any) -> None:
    sm = boto_session.client("sagemaker", region_name=REGION)
    stub = Stubber(sm)
    stub.add_response("describe_cluster", _describe(), {"ClusterName": "hp"})
    page1 = [_node(i, "gpu", "ml.g5.12xlarge") for i in range(2)] + [_node(9, "controller", "ml.m5.2xlarge")]
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": page1, "NextToken": "t1"}, {"ClusterName": "hp"})
    stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": [_node(3, "gpu", "ml.g5.12xlarge", "Failure")]},
                      {"ClusterName": "hp", "NextToken": "t1"})
    session = _SessionWith(boto_session, sagemaker=sm)
    with stub:
        info = describe_hyperpod("hp", region=REGION, session=session)
    stub.assert_no_pending_responses()
    assert info.eks_cluster_name == "hp-eks" and info.status == "InService"
    assert info.healthy_nodes("ml.g5.12xlarge") == 2 and len(info.nodes) == 4
    assert info.node_health() == {"gpu": {"Running": 2, "Failure": 1}, "controller": {"Running": 1}}
    assert "healthy_nodes=3/4" in repr(info) and "<table>" in info._repr_html_()

    # The plan compares groups with healthy nodes.
    rc = HyperPodRayCluster("hp", workers=[("ml.g5.12xlarge", 3)], info=info)
    plan = rc.plan()
    assert plan.placement[0]["healthy_nodes"] == 2
    assert any("3 pods want ml.g5.12xlarge nodes but HyperPod cluster 'hp' has 2 healthy" in w for w in plan.warnings)


@pytest.mark.parametrize("status", ["Creating", "Failed", "SystemUpdating"])
def test_not_in_service_is_named(boto_session: Any, status: str) -> None:
    sm = boto_session.client("sagemaker", region_name=REGION)
    desc = _describe(status)
    if status == "Failed":
        desc["FailureMessage"] = "Lifecycle script on_create.sh failed on i-0abc"
    with Stubber(sm) as stub:
        stub.add_response("describe_cluster", desc, {"ClusterName": "hp"})
        with pytest.raises(HyperPodError, match=f"is {status}, not InService") as e:
            describe_hyperpod("hp", region=REGION, session=_SessionWith(boto_session, sagemaker=sm))
    if status == "Failed":
        assert "on_create.sh failed" in str(e.value)


def test_stubbed_update_cluster_resizes_an_instance_group(boto_session: Any) -> None:
    """moto has no update_cluster; Stubber validates our request against the real UpdateCluster model."""
    sm = boto_session.client("sagemaker", region_name=REGION)
    with Stubber(sm) as stub:
        stub.add_response("describe_cluster", _describe(), {"ClusterName": "hp"})
        stub.add_response("update_cluster", {"ClusterArn": HP_ARN}, {
            "ClusterName": "hp",
            "InstanceGroups": [{"InstanceGroupName": "gpu", "InstanceCount": 5, "InstanceType": "ml.g5.12xlarge",
                                "ExecutionRole": ROLE, "LifeCycleConfig": LIFECYCLE, "ThreadsPerCore": 1}]})
        arn = resize_instance_group("hp", "gpu", 5, region=REGION, session=_SessionWith(boto_session, sagemaker=sm))
        stub.assert_no_pending_responses()
    assert arn == HP_ARN
    with Stubber(sm) as stub:
        stub.add_response("describe_cluster", _describe(), {"ClusterName": "hp"})
        with pytest.raises(HyperPodError, match="no instance group 'cpu'; it has: controller, gpu"):
            resize_instance_group("hp", "cpu", 1, region=REGION, session=_SessionWith(boto_session, sagemaker=sm))


def test_resize_nodes_from_the_cluster_object(boto_session: Any) -> None:
    sm = boto_session.client("sagemaker", region_name=REGION)
    rc = HyperPodRayCluster("hp", region=REGION, session=_SessionWith(boto_session, sagemaker=sm))
    with Stubber(sm) as stub:
        stub.add_response("describe_cluster", _describe(), {"ClusterName": "hp"})
        stub.add_response("update_cluster", {"ClusterArn": HP_ARN}, {
            "ClusterName": "hp",
            "InstanceGroups": [{"InstanceGroupName": "controller", "InstanceCount": 2, "InstanceType": "ml.m5.2xlarge",
                                "ExecutionRole": ROLE, "LifeCycleConfig": LIFECYCLE, "ThreadsPerCore": 1}]})
        assert rc.resize_nodes("controller", 2) == HP_ARN
        stub.assert_no_pending_responses()


def test_stubber_rejects_a_malformed_update() -> None:
    """Control: Stubber really validates against the model (a missing ExecutionRole is refused)."""
    import boto3
    from botocore.exceptions import ParamValidationError

    sm = boto3.client("sagemaker", region_name=REGION)
    with Stubber(sm) as stub:
        stub.add_response("update_cluster", {"ClusterArn": HP_ARN}, None)
        with pytest.raises(ParamValidationError, match="ExecutionRole"):
            sm.update_cluster(ClusterName="hp", InstanceGroups=[{"InstanceGroupName": "gpu", "InstanceCount": 5}])


class _SessionWith:
    """A boto3 session whose client(name) returns the given stubbed clients."""

    def __init__(self, session: Any, **clients: Any) -> None:
        self._session = session
        self._clients = clients
        self.region_name = session.region_name

    def client(self, name: str, **kwargs: Any) -> Any:
        return self._clients.get(name) or self._session.client(name, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)
