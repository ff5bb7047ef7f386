"""End to end without hand-made clients: boto3 (stubbed against the real service models) finds the
HyperPod cluster and its EKS endpoint + CA, real SigV4-signed EKS tokens authenticate to the fake API
server and are refreshed; and kubernetes-client/python itself talks to the fake server (REST paths and
the port-forward WebSocket), which cross-checks that the fake speaks what real clients speak."""

from __future__ import annotations

import base64
import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber
from hyperpod_common import REGION
from test_hyperpod_aws import EKS_ARN, ROLE, _describe, _node, _SessionWith

from skyrl_nb.cluster.hyperpod import hyperpod


def _eks_response(fake: Any) -> dict[str, Any]:
    return {"cluster": {
        "name": "hp-eks", "arn": EKS_ARN, "createdAt": dt.datetime(2026, 11, 1, tzinfo=dt.UTC), "version": "1.33",
        "endpoint": fake.server, "roleArn": ROLE, "status": "ACTIVE",
        "certificateAuthority": {"data": fake.ca_data},
        "accessConfig": {"authenticationMode": "API_AND_CONFIG_MAP"},
    }}


def test_boto3_to_eks_to_ray_cluster(fake_k8s: Any, boto_session: Any) -> None:
    sm = boto_session.client("sagemaker", region_name=REGION)
    eks = boto_session.client("eks", region_name=REGION)
    session = _SessionWith(boto_session, sagemaker=sm, eks=eks)
    nodes = [_node(i, "gpu", "ml.g5.12xlarge") for i in range(3)]
    with Stubber(sm) as sm_stub, Stubber(eks) as eks_stub:
        sm_stub.add_response("describe_cluster", _describe(), {"ClusterName": "hp"})
        sm_stub.add_response("list_cluster_nodes", {"ClusterNodeSummaries": nodes}, {"ClusterName": "hp"})
        eks_stub.add_response("describe_cluster", _eks_response(fake_k8s), {"name": "hp-eks"})
        rc = hyperpod("hp", namespace="team-a", workers=[("ml.g5.12xlarge", 2)], region=REGION, session=session)
        st = rc.up(timeout=10, poll_s=0.01, progress=None)
        sm_stub.assert_no_pending_responses()
        eks_stub.assert_no_pending_responses()
    assert st.ready and st.desired_gpus == 8
    assert rc.plan().placement[0]["healthy_nodes"] == 3
    # Every API request carried a real EKS token: k8s-aws-v1. + base64url of a presigned STS URL.
    assert fake_k8s.bearers
    for bearer in set(fake_k8s.bearers):
        body = bearer.removeprefix("k8s-aws-v1.")
        url = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
        assert url.startswith(f"https://sts.{REGION}.amazonaws.com/?Action=GetCallerIdentity")
        assert "X-Amz-SignedHeaders=host%3Bx-k8s-aws-id" in url and "X-Amz-Expires=60" in url

    # Refresh: with the clock moved past the refresh point, the next request carries a new token.
    tokens = rc.kube._token
    before = len(set(fake_k8s.bearers))
    later = tokens.expires_at - 30  # inside the last minute of validity
    tokens.clock = lambda: later
    time.sleep(1.05)  # SigV4 dates have 1 s resolution: a re-sign within the same second is byte-identical
    rc.status()
    after = len(set(fake_k8s.bearers))  # counts only: assertion messages must not print tokens
    assert tokens.refreshes == 2 and after == before + 1
    rc.delete()


def test_official_kubernetes_client_agrees_with_the_fake(fake_k8s: Any, kube: Any, tmp_path: Path) -> None:
    from fake_k8s import FakeRayDashboard
    from kubernetes import client
    from kubernetes.stream import portforward

    rc = hyperpod("hp", name="xcheck", workers=[("ml.g5.xlarge", 1)], kube=kube)
    rc.up(timeout=10, poll_s=0.01, progress=None)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(base64.b64decode(fake_k8s.ca_data))
    cfg = client.Configuration()
    cfg.host = fake_k8s.server
    cfg.ssl_ca_cert = str(ca)
    cfg.api_key = {"authorization": "k8s-aws-v1.b2ZmaWNpYWw"}
    cfg.api_key_prefix = {"authorization": "Bearer"}
    api = client.ApiClient(cfg)
    custom = client.CustomObjectsApi(api)
    obj = custom.get_namespaced_custom_object("ray.io", "v1", "default", "rayclusters", "xcheck")
    assert obj["status"]["state"] == "ready"
    core = client.CoreV1Api(api)
    pods = core.list_namespaced_pod("default", label_selector="ray.io/cluster=xcheck,ray.io/node-type=head")
    assert len(pods.items) == 1 and pods.items[0].status.phase == "Running"
    head = pods.items[0].metadata.name
    assert core.read_namespaced_secret("xcheck", "default").data["auth_token"]
    # kubernetes-client's own port-forward through the fake's WebSocket endpoint.
    with FakeRayDashboard() as dash:
        fake_k8s.port_targets[("*head*", 8265)] = dash.address
        pf = portforward(core.connect_get_namespaced_pod_portforward, head, "default", ports="8265")
        sock = pf.socket(8265)
        sock.setblocking(True)
        sock.sendall(b"GET /api/version HTTP/1.1\r\nHost: ray\r\nConnection: close\r\n\r\n")
        data = b""
        while True:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        pf.close()
    assert data.startswith(b"HTTP/1.") and b"2.52.1" in data
    rc.delete()


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("SKYRL_NB_HYPERPOD_REAL_RAY") != "1",
                    reason="opt-in (SKYRL_NB_HYPERPOD_REAL_RAY=1): starts a real Ray head, ~20 s idle, "
                           "minutes and flaky on an overloaded 2-core box")
def test_real_ray_jobs_api_through_the_tunnel(fake_k8s: Any, kube: Any) -> None:
    """A real Ray head (token auth, the token KubeRay's Secret holds) behind the fake pod: submit a job,
    wait for it, read its logs, all through the WebSocket port-forward and the Ray token from the Secret."""
    pytest.importorskip("ray")
    import shutil
    import tempfile

    from skyrl_nb.cluster.local import local

    rc = hyperpod("hp", name="real", workers=[("ml.g5.xlarge", 1)], kube=kube)
    rc.up(timeout=10, poll_s=0.01, progress=None)
    tmp = Path(tempfile.mkdtemp(prefix="hp-ray-"))  # short: Ray's socket paths must fit 107 chars
    token_file = tmp / "token"
    token_file.write_text(fake_k8s.ray_tokens["real"])
    token_file.chmod(0o600)
    head = local(num_cpus=1, temp_dir=tmp / "ray", token_path=token_file, timeout=120)
    try:
        fake_k8s.port_targets[("*head*", 8265)] = ("127.0.0.1", int(head.address.rsplit(":", 1)[1]))
        cluster = rc.connect(timeout=5)
        assert cluster.address != head.address  # really the tunnel
        assert cluster.ping().startswith("2.")
        job_id = cluster.client.submit_job(entrypoint="echo hello-from-hyperpod")
        deadline = time.time() + 90
        while str(cluster.client.get_job_status(job_id)) not in ("SUCCEEDED", "FAILED", "JobStatus.SUCCEEDED",
                                                                  "JobStatus.FAILED"):
            assert time.time() < deadline, "job did not finish through the tunnel"
            time.sleep(0.5)
        assert "SUCCEEDED" in str(cluster.client.get_job_status(job_id))
        assert "hello-from-hyperpod" in cluster.client.get_job_logs(job_id)
        assert fake_k8s.ws_sessions >= 3
        cluster.shutdown()
    finally:
        head.shutdown()
        rc.delete()
        shutil.rmtree(tmp, ignore_errors=True)
