"""Placement plans (pure arithmetic) and real placement groups on a private local Ray cluster."""

from __future__ import annotations

import os
import time

import pytest

from skyrl_engine.placement import ClusterResources, Placement, PlacementError, plan_placement

ONE_NODE_3CPU = ClusterResources(total={"CPU": 3.0}, nodes=[{"CPU": 3.0}])


def test_disaggregated_cpu_accounting() -> None:
    plan = plan_placement(
        {"trainer.placement.colocate_all": False, "generator.inference_engine.num_engines": 2}, device="CPU"
    )
    assert plan.policy_bundles == [{"CPU": 1.0}]
    assert plan.engine_bundles == [{"CPU": 1.0}, {"CPU": 1.0}]
    assert plan.total() == {"CPU": 3.0}
    assert plan.problems(ONE_NODE_3CPU) == []
    assert "disaggregated" in repr(plan) and "<code>" in plan._repr_html_()


def test_gpu_accounting_matches_skyrl() -> None:
    nested = {
        "trainer": {"placement": {"colocate_all": False, "policy_num_gpus_per_node": 4, "policy_num_nodes": 2}},
        "generator": {"inference_engine": {"num_engines": 2, "tensor_parallel_size": 2}},
    }
    plan = plan_placement(nested, device="GPU")
    assert plan.policy_bundles == [{"GPU": 4.0, "CPU": 4.0}] * 2
    assert plan.engine_bundles == [{"GPU": 1.0, "CPU": 1.0}] * 4
    assert plan.total() == {"GPU": 12.0, "CPU": 12.0}
    big = ClusterResources(total={"GPU": 16.0, "CPU": 64.0}, nodes=[{"GPU": 8.0, "CPU": 32.0}] * 2)
    assert plan.problems(big) == []
    small_nodes = ClusterResources(total={"GPU": 12.0, "CPU": 64.0}, nodes=[{"GPU": 3.0, "CPU": 16.0}] * 4)
    [problem] = plan.problems(small_nodes)
    assert problem.startswith("trainer.placement.policy_num_gpus_per_node:") and "largest node has 3" in problem


def test_colocated_needs_equal_slots() -> None:
    plan = plan_placement({"trainer.placement.policy_num_gpus_per_node": 2}, device="GPU")
    [problem] = plan.config_problems()
    assert problem.startswith("trainer.placement.colocate_all:")
    assert "= 2 GPU" in problem and "= 1" in problem
    ok = plan_placement({}, device="CPU", policy_num_gpus_per_node=2, num_engines=2)
    assert ok.config_problems() == [] and ok.policy_bundles == [] and ok.total() == {"CPU": 2.0}


def test_policy_spanning_nodes_spreads_and_needs_that_many_nodes() -> None:
    two_nodes = ClusterResources(total={"CPU": 8.0}, nodes=[{"CPU": 4.0}, {"CPU": 4.0}])
    spread = {"trainer.placement.colocate_all": False, "trainer.placement.policy_num_nodes": 2}
    plan = plan_placement(spread, device="CPU")
    assert plan.policy_strategy == "STRICT_SPREAD" and plan.problems(two_nodes) == []
    assert plan_placement({"trainer.placement.colocate_all": False}, device="CPU").policy_strategy == "PACK"
    # enough CPUs in all and on the largest node, but three policy nodes need three Ray nodes
    plan = plan_placement(spread, device="CPU", policy_num_nodes=3)
    [problem] = plan.problems(two_nodes)
    assert problem == (
        "trainer.placement.policy_num_nodes: 3 policy nodes need 3 Ray nodes that can each hold 1 CPU, "
        "but only 2 of the cluster's 2 alive node(s) can"
    )
    # a node too small for a policy bundle does not count
    lopsided = ClusterResources(total={"CPU": 5.0}, nodes=[{"CPU": 4.0}, {"CPU": 1.0}])
    wide = plan_placement(spread, device="CPU", policy_num_gpus_per_node=2)
    [problem] = wide.problems(lopsided)
    assert problem.startswith("trainer.placement.policy_num_nodes: 2 policy nodes") and "only 1 of" in problem


def test_no_gpu_on_cluster_is_one_line() -> None:
    plan = plan_placement({}, device="GPU")
    [problem] = plan.problems(ONE_NODE_3CPU)
    assert "needs 1 GPU but the cluster has 0 GPU" in problem and "\n" not in problem


@pytest.mark.slow
def test_real_placement_groups(engine_ray) -> None:
    ray = engine_ray
    cpus = ray.cluster_resources()["CPU"]

    @ray.remote
    class Where:
        def pid(self) -> int:
            return os.getpid()

    plan = plan_placement({"trainer.placement.colocate_all": False, "generator.inference_engine.num_engines": 2})
    assert plan.device == "CPU"  # read from the cluster: it has no GPU
    with Placement.create(plan, timeout_s=30) as placement:
        assert "reserved" in repr(placement)
        trainer = Where.options(**placement.policy_options(0)).remote()
        engines = [Where.options(**placement.engine_options(i)).remote() for i in range(2)]
        pids = ray.get([trainer.pid.remote()] + [e.pid.remote() for e in engines])
        assert len(set(pids)) == 3  # disaggregated: three processes, each on its own CPU bundle
        # Everything is reserved: a second, identical placement cannot be granted.
        with pytest.raises(PlacementError, match="was not granted within 1 s"):
            Placement.create(plan, timeout_s=1)
        for actor in [trainer, *engines]:
            ray.kill(actor)
    deadline = time.time() + 30  # removal is asynchronous: the bundles come back within moments
    while ray.available_resources().get("CPU", 0) < cpus - 0.01 and time.time() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == pytest.approx(cpus, abs=0.01)

    colocated = plan_placement({"generator.inference_engine.num_engines": 2, "trainer.placement.policy_num_gpus_per_node": 2})
    with Placement.create(colocated, timeout_s=30) as placement:
        trainer = Where.options(**placement.policy_options(0)).remote()
        engine = Where.options(**placement.engine_options(0)).remote()
        assert len(set(ray.get([trainer.pid.remote(), engine.pid.remote()]))) == 2
        ray.kill(trainer)
        ray.kill(engine)


@pytest.mark.slow
def test_impossible_placement_fails_fast_in_one_line(engine_ray) -> None:
    cpus = int(engine_ray.cluster_resources()["CPU"])  # one engine more than the cluster has room for
    plan = plan_placement({"trainer.placement.colocate_all": False, "generator.inference_engine.num_engines": cpus})
    with pytest.raises(PlacementError) as err:
        Placement.create(plan, timeout_s=30)
    message = str(err.value)
    assert message == (
        f"trainer.placement: disaggregated: policy 1 node(s) × 1 CPU + {cpus} engine(s) × tp 1 CPU needs "
        f"{cpus + 1} CPU but the cluster has {cpus} CPU in all"
    )
    with pytest.raises(PlacementError, match="needs 1 GPU but the cluster has 0 GPU"):
        Placement.create(plan_placement({}, device="GPU"))
