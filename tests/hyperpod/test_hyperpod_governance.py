"""HyperPod task governance (Kueue) and the Ray Endpoint Operator against the fake Kubernetes API (issue 37,
items 1 and 2): the queue label on the RayCluster and both pod templates of a governed namespace, the queue
and its quota in the plan, a RayCluster Kueue holds reported with the event's reason at once, and
``dashboard="endpoint"``: the operator's annotation and a connection through ``sagemaker_ray://``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from skyrl_nb.cluster.hyperpod import ClusterNotReady, ClusterQueued, WorkerGroup, hyperpod
from skyrl_nb.cluster.kube import KubeClient

NS = "hyperpod-ns-team-a"
QUEUE = "hyperpod-ns-team-a-localqueue"
CQ = "hyperpod-ns-team-a-clusterqueue"
QUEUE_LABEL, PRIORITY_LABEL = "kueue.x-k8s.io/queue-name", "kueue.x-k8s.io/priority-class"


@pytest.fixture
def kueue_k8s(crd_schema: dict[str, Any]) -> Any:
    """The fake API server with Kueue: team-a's LocalQueue over 8 GPUs of ml.g5.12xlarge."""
    from fake_kueue import FakeKueueKubernetes
    from hyperpod_common import SEEN_SECRETS

    with FakeKueueKubernetes(crd_schema=crd_schema) as fake:
        fake.add_queue(NS, QUEUE, CQ, {"ml.g5.12xlarge": {"cpu": 192, "memory": "768Gi", "nvidia.com/gpu": 8}})
        fake.add_priority_class("training-priority", 50)
        fake.add_priority_class("inference-priority", 100)
        yield fake
        SEEN_SECRETS.update(fake.ray_tokens.values())


@pytest.fixture
def kueue_kube(kueue_k8s: Any) -> KubeClient:
    return KubeClient(kueue_k8s.server, token=lambda: "k8s-aws-v1.dGVzdA", ca_data=kueue_k8s.ca_data,
                      eks_cluster="hp-eks")


def _labels_everywhere(manifest: dict[str, Any]) -> list[dict[str, str]]:
    spec = manifest["spec"]
    return [manifest["metadata"]["labels"], spec["headGroupSpec"]["template"]["metadata"]["labels"],
            *(g["template"]["metadata"]["labels"] for g in spec["workerGroupSpecs"])]


def test_a_governed_namespace_gets_the_queue_label_in_all_three_places(
        kueue_k8s: Any, kueue_kube: KubeClient, crd_schema: dict[str, Any]) -> None:
    rc = hyperpod("hp", namespace=NS, name="rl", kube=kueue_kube, priority="training-priority",
                  workers=[WorkerGroup("ml.g5.12xlarge", 1, name="gpu"), WorkerGroup("ml.m5.4xlarge", 1, name="cpu")])
    assert QUEUE_LABEL not in rc.manifest()["metadata"]["labels"]  # manifest() alone asks nothing
    plan = rc.plan()
    manifest = plan.manifest
    jsonschema.Draft202012Validator(crd_schema).validate(manifest)
    places = _labels_everywhere(manifest)
    assert len(places) == 4  # the RayCluster, the head's template, both worker groups' templates
    assert all(p[QUEUE_LABEL] == QUEUE and p[PRIORITY_LABEL] == "training-priority" for p in places)
    # the plan names the queue, its ClusterQueue and the quota behind it
    text = plan.summary()
    assert (f"queue {NS}/{QUEUE} -> ClusterQueue {CQ}: quota ml.g5.12xlarge: cpu 192, memory 768Gi, "
            "nvidia.com/gpu 8; workloads pending 0, admitted 0") in text
    assert not [w for w in plan.warnings if "priority" in w or "quota" in w]
    assert f"queue='{QUEUE}'" in repr(rc) and "dashboard=port-forward" in repr(rc)

    # up(): Kueue admits it (4 GPUs of 8) after holding it suspended for a moment, which is not reported as held
    st = rc.up(timeout=10, poll_s=0.01, progress=None)
    assert st.ready and not st.suspended
    stored = kueue_k8s.objects[("rayclusters", NS, "rl")]
    assert all(p[QUEUE_LABEL] == QUEUE for p in _labels_everywhere(stored))
    assert [e["reason"] for e in kueue_k8s.events] == ["CreatedWorkload", "QuotaReserved", "Admitted", "Started"]


def test_a_raycluster_kueue_holds_is_reported_with_the_events_reason_within_seconds(
        kueue_k8s: Any, kueue_kube: KubeClient) -> None:
    kueue_k8s.admit_after = 2  # Kueue decides on the second look, as a scheduling cycle would
    rc = hyperpod("hp", namespace=NS, name="big", kube=kueue_kube, workers=[WorkerGroup("ml.g5.12xlarge", 4, name="gpu")])
    assert "asks 16 GPUs and Kueue admits it whole: queue 'hyperpod-ns-team-a-localqueue' has a nominal quota of 8" \
        in " ".join(rc.plan().warnings)
    start = time.monotonic()
    with pytest.raises(ClusterQueued) as info:
        rc.up(progress=None)  # the defaults: a 900 s timeout, a poll every 5 s
    elapsed = time.monotonic() - start
    assert elapsed < 10, f"took {elapsed:.1f}s"
    err = info.value
    assert err.reason == ("Pending: couldn't assign flavors to pod set gpu: insufficient quota for nvidia.com/gpu "
                          "in flavor ml.g5.12xlarge, 8 more needed")
    assert str(err).startswith(f"RayCluster {NS}/big is held by Kueue in queue '{QUEUE}' (suspended, not admitted): "
                               "Pending: couldn't assign flavors")
    assert "\n" not in str(err) and "rc.wait_ready(queued=True)" in str(err)
    assert err.status is not None and err.status.suspended and not err.status.pods
    assert "suspended (spec.suspend" in err.status.stuck()
    # with queued=True it waits for admission instead and, when time runs out, still says why
    with pytest.raises(ClusterNotReady) as waited:
        rc.wait_ready(timeout=0.3, poll_s=0.1, progress=None, queued=True)
    assert "held by Kueue: Pending: couldn't assign flavors" in str(waited.value)


def test_queue_choice_unreadable_quota_and_an_ungoverned_namespace(kueue_k8s: Any, kueue_kube: KubeClient) -> None:
    workers = [WorkerGroup("ml.g5.12xlarge", 1)]
    # a ClusterQueue a namespace-scoped access entry cannot read: the quota is unknown, and the plan says why
    kueue_k8s.forbid("get", "clusterqueues")
    plan = hyperpod("hp", namespace=NS, kube=kueue_kube, workers=workers, priority="urgent").plan()
    assert f"queue {NS}/{QUEUE} -> ClusterQueue {CQ}: quota unknown (ClusterQueue {CQ} not readable: HTTP 403)" \
        in plan.summary()
    assert any("priority='urgent' is not a Kueue WorkloadPriorityClass here; known: inference-priority, "
               "training-priority" in w for w in plan.warnings)
    # a named queue that is not there, or two queues and none named: one line each, naming the queues
    with pytest.raises(ValueError, match=f"queue='other' is not a Kueue LocalQueue in namespace '{NS}'; it has: {QUEUE}"):
        hyperpod("hp", namespace=NS, kube=kueue_kube, workers=workers, queue="other").plan()
    kueue_k8s.add_queue(NS, "research", "research-cq", {"ml.g5.12xlarge": {"nvidia.com/gpu": 4}})
    with pytest.raises(ValueError, match=f"several Kueue LocalQueues \\({QUEUE}, research\\): pass queue="):
        hyperpod("hp", namespace=NS, kube=kueue_kube, workers=workers).plan()
    assert hyperpod("hp", namespace=NS, kube=kueue_kube, workers=workers, queue="research").plan().manifest[
        "metadata"]["labels"][QUEUE_LABEL] == "research"
    # queue="" opts out; a namespace without a LocalQueue, or a cluster without Kueue, gets no label
    for rc in (hyperpod("hp", namespace=NS, kube=kueue_kube, workers=workers, queue=""),
               hyperpod("hp", namespace="default", kube=kueue_kube, workers=workers)):
        plan = rc.plan()
        assert plan.queue is None and QUEUE_LABEL not in plan.manifest["metadata"]["labels"]
    with pytest.raises(ValueError, match="queue='not a label!' is not a Kubernetes label value"):
        hyperpod("hp", queue="not a label!")


def test_no_kueue_on_the_cluster(fake_k8s: Any, kube: KubeClient) -> None:
    plan = hyperpod("hp", namespace="team-a", kube=kube, workers=["ml.g5.xlarge"], priority="training-priority").plan()
    assert plan.queue is None and QUEUE_LABEL not in plan.manifest["metadata"]["labels"]
    assert any("priority='training-priority' has no effect: namespace 'team-a' has no Kueue LocalQueue" in w
               for w in plan.warnings)
    with pytest.raises(ValueError, match="queue='q': Kueue is not installed on this cluster"):
        hyperpod("hp", namespace="team-a", kube=kube, workers=["ml.g5.xlarge"], queue="q").plan()


def test_dashboard_endpoint_annotates_and_connects_through_sagemaker_ray(
        fake_k8s: Any, kube: KubeClient, crd_schema: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("sagemaker_ray")  # AWS's toolkit: the module hook Ray's job client imports for the scheme
    from fake_k8s import CONNECTION_GROUP, FakeRayDashboard, FakeRayEndpoint

    with pytest.raises(ValueError, match="dashboard='ingress' is not one of: port-forward, endpoint"):
        hyperpod("hp", dashboard="ingress")
    rc = hyperpod("hp", namespace="team-a", name="rl", kube=kube, workers=["ml.g5.xlarge"], dashboard="endpoint")
    manifest = rc.manifest()
    assert manifest["metadata"]["annotations"] == {"access.sagemaker.amazonaws.com/enabled": "true"}
    jsonschema.Draft202012Validator(crd_schema).validate(manifest)
    assert "dashboard endpoint)" in rc.plan().summary().splitlines()[0]
    assert "annotations" not in hyperpod("hp", workers=["ml.g5.xlarge"]).manifest()["metadata"]

    rc.up(timeout=10, poll_s=0.01, progress=None)
    with FakeRayDashboard() as dash:
        head = f"http://{dash.address[0]}:{dash.address[1]}"
        with FakeRayEndpoint(head) as endpoint:
            fake_k8s.ray_endpoints[("team-a", "rl")] = endpoint
            monkeypatch.setenv("REQUESTS_CA_BUNDLE", endpoint.ca_path)  # the endpoint's own certificate
            monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # the cluster's own one is used instead
            cluster = rc.connect(timeout=5)
            assert cluster.address == "sagemaker_ray://rl/team-a" and cluster.port_forward is None
            assert cluster.ping() == "2.52.1"  # through the toolkit's hook, the endpoint and its cookie
            assert cluster.client is cluster.client
    import os

    assert os.environ["KUBECONFIG"] == "/nonexistent/kubeconfig"  # only set while the job client was made
    connection = f"/apis/{CONNECTION_GROUP}/v1alpha1/namespaces/team-a/raydashboardconnections"
    assert ("POST", connection) in fake_k8s.requests
    assert ("GET", "/api/version") in endpoint.forwarded
    assert fake_k8s.ws_sessions == 0 and not any(p.endswith("/portforward") for _, p in fake_k8s.requests)
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    assert oct(Path(cluster.kubeconfig).stat().st_mode & 0o777) == "0o600"
    assert config["clusters"][0]["cluster"]["server"] == fake_k8s.server


def test_the_kubeconfig_for_eks_signs_with_this_interpreter(tmp_path: Path) -> None:
    """With an EKS token source the kubeconfig's user is `python -m skyrl_nb.cluster.kube token`, which prints an
    ExecCredential the toolkit reads: no AWS CLI, no token in the file."""
    from skyrl_nb.cluster.hyperpod_connect import write_kubeconfig
    from skyrl_nb.cluster.kube import EksTokenSource

    kube = KubeClient("https://eks.example", token=EksTokenSource("hp-eks", region="us-west-2"), ca_data="Q0E=")
    path = write_kubeconfig(kube, tmp_path / "config")
    user = yaml.safe_load(path.read_text())["users"][0]["user"]
    assert "token" not in user and user["exec"]["command"] == sys.executable
    out = subprocess.run([user["exec"]["command"], *user["exec"]["args"]], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    credential = json.loads(out.stdout)
    assert credential["kind"] == "ExecCredential" and credential["status"]["token"].startswith("k8s-aws-v1.")
    assert user["exec"]["args"][-2:] == ["hp-eks", "us-west-2"]
