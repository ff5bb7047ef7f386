"""`Cluster.plan(config)`: what a config asks of a Ray cluster, each rank's memory against its devices, and
a one-line refusal when a rank cannot fit. The dashboard's node list is canned (no Ray here)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

GiB = 2**30
QWEN2_1_5B = {"model_type": "qwen2", "hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
              "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936, "tie_word_embeddings": True}


def _cluster(nodes: list[dict[str, float]]) -> Any:
    """A Cluster whose dashboard answers the state API's node list with `nodes` (and one dead node)."""
    from skyrl_nb.cluster.base import Cluster

    cluster = Cluster("http://127.0.0.1:9", token="t", name="canned")
    rows = [{"state": "ALIVE", "resources_total": n} for n in nodes]
    rows.append({"state": "DEAD", "resources_total": {"CPU": 64.0, "GPU": 8.0}})
    cluster._get = lambda path, timeout=10.0: {"data": {"result": {"result": rows}}}
    cluster.shared_paths = ("/",)  # it sees this disk (the model folder, the run root): no probe job
    return cluster


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    folder = tmp_path / "qwen2-1.5b"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN2_1_5B))
    return folder


def test_plan_shows_the_estimate_beside_the_clusters_devices(model: Path, tmp_path: Path) -> None:
    cluster = _cluster([{"CPU": 48.0, "GPU": 4.0, "memory": 150.0 * GiB, "accelerator_type:A10G": 4.0},
                        {"CPU": 8.0, "memory": 30.0 * GiB}])
    assert cluster.resources() == {"nodes": 2, "CPU": 56.0, "GPU": 4.0, "memory_gb": 180.0, "accelerator_type:A10G": 4.0}
    plan = cluster.plan("quickstart", overrides=[f"trainer.policy.model.path={model}", f"run.run_root={tmp_path}",
                                                 "trainer.placement.policy_num_gpus_per_node=4",
                                                 "generator.inference_engine.num_engines=4"])  # colocated: 4 = 4
    assert plan.memory.role("policy").total == 4 * 1_543_714_304
    assert plan.capacity.device_bytes == 24 * GiB and plan.capacity.source == "A10G"
    text = repr(plan)
    assert "cluster has: nodes 2, CPU 56, GPU 4" in text and "one rank has: RankCapacity(GPU 24.0 GiB" in text
    assert "policy fsdp2 over 4 ranks" in text and "5.8 GiB on the device" in text
    assert "<table>" in plan._repr_html_() and "asks for:" in plan._repr_html_()
    assert "engine code: shipped with the job as Ray py_modules (skyrl_core from" in text
    assert "config: travels in the submission (" in text
    assert f"run store: {tmp_path} (a folder this cluster sees at the same path)" in text


def test_plan_refuses_ranks_that_cannot_fit(model: Path, tmp_path: Path) -> None:
    from skyrl_core.config import ConfigError

    cluster = _cluster([{"CPU": 48.0, "GPU": 4.0, "memory": 150.0 * GiB, "accelerator_type:A10G": 4.0}])
    with pytest.raises(ConfigError) as info:  # one worker: 23.0 GiB, plus the frozen reference 5.8 GiB
        cluster.plan("quickstart", overrides=[f"trainer.policy.model.path={model}", f"run.run_root={tmp_path}",
                                              "trainer.algorithm.use_kl_loss=true"])
    (line,) = info.value.problems
    assert line.startswith("trainer.placement.policy_num_gpus_per_node, trainer.strategy, trainer.algorithm.use_kl_loss: "
                           "rank 0 needs 28.8 GiB (policy 23.0, reference 5.8) but a GPU (A10G) has 24.0 GiB")
    assert cluster._client_obj is None  # no job client was made: nothing was submitted
    # a CPU cluster: the node's memory over the ranks on it
    cpu = _cluster([{"CPU": 4.0, "memory": 40.0 * GiB}])
    with pytest.raises(ConfigError, match=r"a CPU rank has 20.0 GiB \(node memory 40.0 GiB / 2 rank\(s\)\)"):
        cpu.plan("quickstart", overrides=[f"trainer.policy.model.path={model}", f"run.run_root={tmp_path}",
                                          "trainer.placement.policy_num_gpus_per_node=2", "trainer.strategy=ddp"])
    # a GPU whose memory the table does not know: shown, not refused
    odd = _cluster([{"CPU": 8.0, "GPU": 1.0, "memory": 64.0 * GiB, "accelerator_type:XYZ": 1.0}])
    plan = odd.plan("quickstart", overrides=[f"trainer.policy.model.path={model}", f"run.run_root={tmp_path}"])
    assert plan.capacity.device_bytes is None and "GPU unknown" in repr(plan)
    # an invalid config is refused by the one validation, before the cluster is asked
    with pytest.raises(ConfigError, match="trainer.strategy"):
        odd.plan("quickstart", overrides=["trainer.strategy=zero3"])
