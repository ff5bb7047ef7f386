"""RayCluster manifests for several shapes validate against the real KubeRay CRD schema."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from skyrl_nb.cluster.hyperpod import WorkerGroup, hyperpod

SHAPES: dict[str, dict[str, Any]] = {
    "1 group, no GPU EFA, token auth": {"workers": [("ml.g5.xlarge", 1)]},
    "1 group, auth disabled": {"workers": [("ml.g5.2xlarge", 2)], "auth": False},
    "2 groups, FSx": {"workers": [("ml.g5.12xlarge", 2), ("ml.g5.xlarge", 1)], "fsx_claim": "fsx-claim"},
    "3 groups, EFA p4d/p5, FSx, head pinned": {
        "workers": [("ml.p4d.24xlarge", 2), ("ml.p5.48xlarge", 1), WorkerGroup("ml.g5.xlarge", 2, name="rollout")],
        "fsx_claim": "fsx-claim", "head_instance_type": "ml.m5.2xlarge"},
    "4 groups, mixed, no auth, no FSx": {
        "workers": [WorkerGroup("ml.g5.48xlarge", 1, name="trainer"), WorkerGroup("ml.g5.12xlarge", 2, gpus=2),
                    {"instance_type": "ml.g6e.12xlarge", "replicas": 1, "max_replicas": 4},
                    WorkerGroup("ml.m5.4xlarge", 3, name="cpu-envs")],
        "auth": False},
    "4 groups, EFA, FSx, env, instance-group pin": {
        "workers": [WorkerGroup("ml.p5en.48xlarge", 2, instance_group="p5en-a", name="a"),
                    WorkerGroup("ml.p5en.48xlarge", 2, instance_group="p5en-b", name="b"),
                    WorkerGroup("ml.g6.12xlarge", 1), WorkerGroup("ml.g5.8xlarge", 1)],
        "fsx_claim": "fsx-lustre", "env": {"NCCL_DEBUG": "WARN"}},
    "custom instance type with explicit shape": {
        "workers": [WorkerGroup("ml.g7.fake", 1, gpus=2, efa=1, cpu=30, memory_gib=200)]},
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_manifest_validates_against_crd(shape: str, crd_schema: dict[str, Any]) -> None:
    kwargs = SHAPES[shape]
    manifest = hyperpod("hp", namespace="team-a", **kwargs).manifest()
    jsonschema.Draft202012Validator(crd_schema).validate(manifest)

    spec = manifest["spec"]
    assert manifest["apiVersion"] == "ray.io/v1" and manifest["kind"] == "RayCluster"
    head = spec["headGroupSpec"]
    assert head["rayStartParams"]["dashboard-host"] == "0.0.0.0"
    assert head["rayStartParams"]["metrics-export-port"] == "8080"
    head_c = head["template"]["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in head_c["resources"]["limits"]
    # the engine's Prometheus endpoint (run.prometheus_port) on the head pod, where the job's driver runs
    assert head["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true", "prometheus.io/port": "9464", "prometheus.io/path": "/metrics"}
    assert {"containerPort": 9464, "name": "engine-metrics"} in head_c["ports"]
    assert head["template"]["spec"]["nodeSelector"]["sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
    assert len(spec["workerGroupSpecs"]) == len(kwargs["workers"])
    for group, wg in zip(spec["workerGroupSpecs"], kwargs["workers"], strict=True):
        w = WorkerGroup.coerce(wg)
        pod = group["template"]["spec"]
        c = pod["containers"][0]
        assert c["lifecycle"]["preStop"]["exec"]["command"][-1] == "ray stop"
        assert pod["nodeSelector"]["node.kubernetes.io/instance-type"] == w.instance_type
        assert pod["nodeSelector"]["sagemaker.amazonaws.com/node-health-status"] == "Schedulable"
        if w.gpus:
            assert c["resources"]["limits"]["nvidia.com/gpu"] == w.gpus
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        else:
            assert "nvidia.com/gpu" not in c["resources"]["limits"] and "tolerations" not in pod
        assert c["resources"]["limits"].get("vpc.amazonaws.com/efa", 0) == w.efa
        mounts = {m["mountPath"] for m in c["volumeMounts"]}
        assert ("/fsx" in mounts) == bool(kwargs.get("fsx_claim"))
    assert ("authOptions" in spec) == kwargs.get("auth", True)
    if kwargs.get("auth", True):
        assert spec["authOptions"] == {"mode": "token"}
    if kwargs.get("fsx_claim"):
        vols = head["template"]["spec"]["volumes"]
        assert {"name": "fsx", "persistentVolumeClaim": {"claimName": kwargs["fsx_claim"]}} in vols


def test_efa_follows_instance_type() -> None:
    groups = hyperpod("hp", workers=["ml.p5.48xlarge", "ml.g5.12xlarge", "ml.g5.xlarge"]).manifest()[
        "spec"]["workerGroupSpecs"]
    efa = [g["template"]["spec"]["containers"][0]["resources"]["limits"].get("vpc.amazonaws.com/efa") for g in groups]
    assert efa == [32, 1, None]


def test_validator_is_live(crd_schema: dict[str, Any]) -> None:
    """Negative controls: the schema rejects what the API server would reject."""
    manifest = hyperpod("hp", workers=[("ml.g5.xlarge", 1)]).manifest()
    v = jsonschema.Draft202012Validator(crd_schema)
    bad = [
        ("authOptions.mode", lambda m: m["spec"].update(authOptions={"mode": "oidc"})),
        ("rayStartParams not strings", lambda m: m["spec"]["headGroupSpec"]["rayStartParams"].update({"num-gpus": 0})),
        ("missing groupName", lambda m: m["spec"]["workerGroupSpecs"][0].pop("groupName")),
        ("replicas as string", lambda m: m["spec"]["workerGroupSpecs"][0].update(replicas="2")),
    ]
    import copy

    for what, mutate in bad:
        m = copy.deepcopy(manifest)
        mutate(m)
        assert list(v.iter_errors(m)), f"schema accepted a manifest with {what}"


def test_bad_inputs_are_explained() -> None:
    with pytest.raises(ValueError, match="ml.nope.xlarge.*pass gpus="):
        hyperpod("hp", workers=["ml.nope.xlarge"])
    with pytest.raises(ValueError, match="has 1 GPUs, asked for 4"):
        hyperpod("hp", workers=[WorkerGroup("ml.g5.xlarge", 1, gpus=4)])
    with pytest.raises(ValueError, match="names must differ"):
        hyperpod("hp", workers=["ml.g5.xlarge", "ml.g5.xlarge"])


def test_plan_touches_nothing_and_reads_well(monkeypatch: pytest.MonkeyPatch) -> None:
    import boto3

    monkeypatch.setattr(boto3, "Session", lambda *a, **k: pytest.fail("plan() must not touch AWS"))
    rc = hyperpod("hp", workers=[("ml.g5.12xlarge", 2)], fsx_claim="fsx")
    plan = rc.plan()
    text = repr(plan)
    assert "g5-12xlarge" in text and "x2" in text and "4 GPU/pod" in text and "auth token" in text
    assert "apiVersion: ray.io/v1" in plan.to_yaml()
    assert "<pre>" in plan._repr_html_()
    assert "HyperPodRayCluster(" in repr(rc) and "<table>" in rc._repr_html_()


def test_plan_with_a_config_shows_and_checks_each_ranks_memory(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    import boto3

    from skyrl_core.config import ConfigError, load_config

    monkeypatch.setattr(boto3, "Session", lambda *a, **k: pytest.fail("plan() must not touch AWS"))
    model = tmp_path / "qwen2-1.5b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
        "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}))
    config = load_config("quickstart", [f"trainer.policy.model.path={model}", "trainer.algorithm.use_kl_loss=true",
                                        f"run.run_root={tmp_path}"])
    # one worker (23.0 GiB) and the frozen reference (5.8 GiB) on one A10G (24 GiB): refused, nothing touched
    with pytest.raises(ConfigError) as info:
        hyperpod("hp", workers=[("ml.g5.12xlarge", 1)]).plan(config=config)
    (line,) = info.value.problems
    assert "rank 0 needs 28.8 GiB (policy 23.0, reference 5.8) but a GPU (A10G) has 24.0 GiB" in line
    assert line.startswith("trainer.placement.policy_num_gpus_per_node, trainer.strategy, trainer.algorithm.use_kl_loss:")
    # fsdp2 over the node's 4 GPUs fits, and the plan says so
    plan = hyperpod("hp", workers=[("ml.g5.12xlarge", 1)]).plan(
        config=config.with_overrides(["trainer.placement.policy_num_gpus_per_node=4"]))
    assert plan.memory.role("policy").total == 1_543_714_304 * 4 and plan.capacity.source == "A10G"
    assert "memory per rank: policy 5.8 GiB per rank (fsdp2 over 4 ranks), reference 5.8 GiB" in repr(plan)
    assert "one rank has: RankCapacity(GPU 24.0 GiB, host 40.8 GiB per rank (A10G))" in repr(plan)
    # an H100 holds the single worker; CPU-only groups count the pod's memory
    assert hyperpod("hp", workers=[("ml.p5.48xlarge", 1)]).plan(config=config).capacity.device_bytes == 80 * 2**30
    cpu = hyperpod("hp", workers=[("ml.m5.4xlarge", 2)]).plan(config=config).capacity  # 64 GiB x 0.85 per pod
    assert (cpu.device, cpu.device_bytes) == ("CPU", 54 * 2**30)
