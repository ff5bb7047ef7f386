"""Studio detection (resource-metadata file + environment, identity through STS on moto) and the
cluster panel driven against the fake API server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from skyrl_nb import studio

META = {
    "AppType": "JupyterLab",
    "DomainId": "d-abc123xyz",
    "UserProfileName": "alice",
    "SpaceName": "rl-space",
    "ResourceArn": "arn:aws:sagemaker:us-east-1:123456789012:app/d-abc123xyz/rl-space/JupyterLab/default",
    "ResourceName": "default",
}


@pytest.fixture
def in_studio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "resource-metadata.json"
    path.write_text(json.dumps(META))
    monkeypatch.setenv("SKYRL_NB_STUDIO_METADATA", str(path))
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    return path


def test_outside_studio(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SKYRL_NB_STUDIO_METADATA", str(tmp_path / "missing.json"))
    monkeypatch.delenv("SAGEMAKER_SPACE_NAME", raising=False)
    s = studio.info()
    assert not s.in_studio and studio.proxy_url(8265) is None
    assert repr(s) == "StudioInfo(in_studio=False)" and "Not running" in s._repr_html_()


def test_inside_studio(in_studio: Path) -> None:
    s = studio.info()
    assert s.in_studio and (s.domain_id, s.user_profile, s.space, s.app_type) == (
        "d-abc123xyz", "alice", "rl-space", "JupyterLab")
    assert s.region == "us-east-1"  # from the ResourceArn when AWS_REGION is unset
    assert studio.proxy_url(8265) == "https://d-abc123xyz.studio.us-east-1.sagemaker.aws/jupyterlab/default/proxy/8265/"
    assert "alice" in repr(s) and "rl-space" in s._repr_html_()
    # base.Cluster (the other engineer's) builds its dashboard link through this module.
    from skyrl_nb.cluster.base import Cluster

    assert Cluster("http://127.0.0.1:41234").dashboard_url.endswith("/jupyterlab/default/proxy/41234/")


def test_code_editor_and_env_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({**META, "AppType": "CodeEditor"}))
    monkeypatch.setenv("SKYRL_NB_STUDIO_METADATA", str(path))
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert studio.proxy_url(3000) == "https://d-abc123xyz.studio.eu-west-1.sagemaker.aws/codeeditor/default/proxy/3000/"
    monkeypatch.setenv("SKYRL_NB_STUDIO_METADATA", str(tmp_path / "missing.json"))
    monkeypatch.setenv("SAGEMAKER_SPACE_NAME", "only-env")
    assert studio.info().space == "only-env" and studio.proxy_url(80) == "/jupyterlab/default/proxy/80/"


def test_execution_role_through_sts(in_studio: Path, boto_session: Any) -> None:
    from moto import mock_aws

    assert studio.assumed_role_to_role_arn(
        "arn:aws:sts::123456789012:assumed-role/AmazonSageMaker-ExecutionRole-2026/SageMaker"
    ) == "arn:aws:iam::123456789012:role/AmazonSageMaker-ExecutionRole-2026"
    with mock_aws():
        iam = boto_session.client("iam")
        iam.create_role(RoleName="StudioExec", AssumeRolePolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole",
                                                    "Principal": {"Service": "sagemaker.amazonaws.com"}}]}))
        creds = boto_session.client("sts").assume_role(
            RoleArn="arn:aws:iam::123456789012:role/StudioExec", RoleSessionName="SageMaker")["Credentials"]
        import boto3

        assumed = boto3.Session(aws_access_key_id=creds["AccessKeyId"], aws_secret_access_key=creds["SecretAccessKey"],
                                aws_session_token=creds["SessionToken"], region_name="us-east-1")
        assert studio.execution_role(session=assumed) == "arn:aws:iam::123456789012:role/StudioExec"


def test_panel_drives_the_cluster(fake_k8s: Any, kube: Any) -> None:
    from skyrl_nb.cluster.hyperpod import HyperPodInfo, WorkerGroup, hyperpod
    from skyrl_widgets.cluster_panel import ClusterPanel

    info = HyperPodInfo(name="hp", arn="arn", status="InService", eks_cluster_arn="arn:aws:eks:r:1:cluster/hp-eks",
                        region="us-west-2",
                        instance_groups=[{"InstanceGroupName": "gpu", "InstanceType": "ml.g5.12xlarge",
                                          "CurrentCount": 3, "TargetCount": 3}],
                        nodes=[{"InstanceGroupName": "gpu", "InstanceType": "ml.g5.12xlarge",
                                "InstanceStatus": {"Status": s}} for s in ("Running", "Running", "Failure")])
    rc = hyperpod("hp", name="rl", workers=[WorkerGroup("ml.g5.12xlarge", 1, name="gpu")], kube=kube, info=info)
    rc.up = (lambda up: lambda **kw: up(timeout=10, poll_s=0.01, progress=None))(rc.up)  # fast polling
    panel = rc.panel()
    assert isinstance(panel, ClusterPanel)
    assert "HyperPod hp" in panel.hyperpod_html.value and "Failure: 1" in panel.hyperpod_html.value
    assert "not created" in panel.raycluster_html.value and "connect()" in panel.link_html.value

    panel.up_button.click()
    assert "up: done" in panel.message.value, panel.message.value
    assert ">ready<" in panel.raycluster_html.value and "1/1 ready" in panel.raycluster_html.value
    assert panel.group.options == ("gpu",) and panel.replicas.value == 1

    panel.replicas.value = 2
    panel.scale_button.click()
    assert "scale: done" in panel.message.value, panel.message.value
    assert fake_k8s.objects[("rayclusters", "default", "rl")]["spec"]["workerGroupSpecs"][0]["replicas"] == 2
    assert panel.replicas.value == 2

    panel.down_button.click()  # first click only asks
    assert ("rayclusters", "default", "rl") in fake_k8s.objects and "Click again" in panel.message.value
    panel.down_button.click()
    assert ("rayclusters", "default", "rl") not in fake_k8s.objects
    assert "not created" in panel.raycluster_html.value and "ClusterPanel(default/rl" in repr(panel)


def test_panel_shows_errors_instead_of_raising(fake_k8s: Any, kube: Any) -> None:
    from skyrl_nb.cluster.hyperpod import hyperpod

    fake_k8s.forbid("create", "rayclusters")
    rc = hyperpod("hp", name="rl", kube=kube)
    rc._info = None
    panel = rc.panel()
    panel.up_button.click()
    assert "up failed" in panel.message.value and "AmazonSagemakerHyperpodTrainingPolicy" in panel.message.value
