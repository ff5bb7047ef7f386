"""The config form and the engine agree on every placement (issue 33): a grid of colocate on/off × policy GPUs
per node × policy nodes × engines × cluster sizes goes through the form's own check (a real `ConfigForm` on a
cluster whose dashboard answers with canned nodes) and through the engine's own code path (`train`'s config
check, `workers.runs_in_job_process`, `placement.plan_placement` and the check `Placement.create` makes,
reading the cluster's resources where Ray's would come from). No plan is accepted by one and refused by the
other, and a refusal is the same words on both sides."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

CLUSTERS = {  # what each node has, as Ray counts it
    "one 2-CPU node": [{"CPU": 2.0, "memory": 8.0 * 2**30}],
    "two 2-CPU nodes": [{"CPU": 2.0, "memory": 8.0 * 2**30}, {"CPU": 2.0, "memory": 8.0 * 2**30}],
    "one node with 8 GPUs": [{"CPU": 16.0, "GPU": 8.0, "memory": 64.0 * 2**30}],
}
GRID = list(itertools.product([True, False], [1, 2, 4, 8], [1, 2], [1, 2, 8]))
"""(colocate_all, policy_num_gpus_per_node, policy_num_nodes, num_engines)"""


def _values(colocate: bool, per_node: int, nodes: int, engines: int) -> dict[str, Any]:
    return {"trainer.placement.colocate_all": colocate, "trainer.placement.policy_num_gpus_per_node": per_node,
            "trainer.placement.policy_num_nodes": nodes, "generator.inference_engine.num_engines": engines}


def _engine_refusal(values: dict[str, Any], nodes: list[dict[str, float]], monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the engine says of this config on this cluster: the lines `train` exits with (config problems, or the
    PlacementError's parts), [] when it would start its workers."""
    import torch

    import skyrl_engine.placement as placement
    from skyrl_core.config import ConfigError
    from skyrl_core.placement import ClusterResources
    from skyrl_engine.__main__ import load_checked_config
    from skyrl_engine.workers import runs_in_job_process

    try:
        cfg = load_checked_config("quickstart", [f"{k}={str(v).lower()}" for k, v in values.items()])
    except ConfigError as err:
        return err.problems
    resources = ClusterResources.from_nodes(nodes)
    # the job's driver sees CUDA where the cluster has GPUs; Ray's resources are the cluster's nodes
    monkeypatch.setattr(torch.cuda, "is_available", lambda: resources.device == "GPU")
    monkeypatch.setattr(placement, "cluster_resources", lambda: resources)
    if runs_in_job_process(cfg):
        return []
    try:
        placement.refuse_impossible(placement.plan_placement(cfg))
    except placement.PlacementError as err:
        assert str(err) == "; ".join(err.problems)  # the one line train prints
        return err.problems
    return []


def test_form_and_engine_accept_and_refuse_the_same_plans(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import skyrl_engine.placement as placement
    from skyrl_core.placement import ClusterResources
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.form import configure

    verdicts: dict[str, list[bool]] = {}
    disagreements = []
    for name, nodes in CLUSTERS.items():
        cluster = Cluster("http://127.0.0.1:9", token="t", name=name)
        cluster.node_resources = lambda nodes=nodes: nodes  # the dashboard's node list, canned
        form = configure("quickstart", overrides=[f"run.run_root={tmp_path}"], cluster=cluster)
        for point in GRID:
            values = _values(*point)
            form.view.set_values(values)  # as typed into the fields, then the form's own check
            form_lines = form.validate()
            engine_lines = _engine_refusal(values, nodes, monkeypatch)
            verdicts.setdefault(name, []).append(not engine_lines)
            if form_lines != engine_lines:
                disagreements.append((name, point, form_lines, engine_lines))
            # every refusal is visible in the form, one line each, none hidden
            assert form.view.launch.disabled == bool(form_lines)
            assert form.view.launch_reason.value.count("<span") == len(form_lines) and "more)" not in \
                form.view.launch_reason.value
    assert not disagreements, disagreements[:3]
    for name, accepted in verdicts.items():  # the grid has both kinds everywhere: the comparison means something
        assert 0 < sum(accepted) < len(accepted), (name, sum(accepted))
    # the check above is the one Placement.create makes before it reserves anything
    monkeypatch.setattr(placement, "cluster_resources", lambda: ClusterResources.from_nodes(CLUSTERS["one 2-CPU node"]))
    with pytest.raises(placement.PlacementError, match="needs 9 CPU but the cluster has 2 CPU in all"):
        placement.Placement.create(placement.plan_placement({"trainer.placement.colocate_all": False,
                                                             "trainer.placement.policy_num_gpus_per_node": 8}))


def test_the_issues_two_cases_are_refused_before_launch(tmp_path: Any) -> None:
    """Colocated, 2 policy GPUs per node: refused by the form with no cluster, in the words `train` fails with;
    colocated, 8 per node on a 2-CPU cluster without GPU: Launch off with the colocation rule (was: enabled)."""
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.form import configure

    form = configure("quickstart", overrides=[f"run.run_root={tmp_path}", "trainer.placement.policy_num_gpus_per_node=2"])
    (line,) = form.problems
    assert line.startswith("trainer.placement.colocate_all: the policy uses policy_num_nodes × policy_num_gpus_per_node"
                           " = 1 × 2 = 2 CPU but the engines use num_engines × tensor_parallel_size = 1 × 1 = 1")
    cluster = Cluster("http://127.0.0.1:9", token="t")
    cluster.node_resources = lambda: CLUSTERS["one 2-CPU node"]
    form = configure("quickstart", overrides=[f"run.run_root={tmp_path}", "trainer.placement.policy_num_gpus_per_node=8"],
                     cluster=cluster)
    assert form.view.launch.disabled and [p.split(":")[0] for p in form.problems] == ["trainer.placement.colocate_all"]
    assert "= 8 CPU but the engines use" in form.problems[0]


def test_validate_refuses_what_train_would_with_the_forms_words(tmp_path: Any, capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m skyrl_engine validate --config quickstart trainer.placement.policy_num_gpus_per_node=2`` printed
    ``ok`` while ``train`` failed with a PlacementError (issue 33): now exit 2 with the form's line. As a job on a
    cluster it also applies the cluster's size; a package the config needs and this machine lacks is refused."""
    import importlib.util

    import ray

    import skyrl_engine.placement as placement
    import skyrl_engine.ray_runtime as ray_runtime
    from skyrl_core.placement import ClusterResources
    from skyrl_engine.__main__ import main
    from skyrl_nb.form import configure

    for var in ("RAY_ADDRESS", *ray_runtime.JOB_ENV_VARS):
        monkeypatch.delenv(var, raising=False)
    words = "trainer.placement.policy_num_gpus_per_node=2"
    assert main(["validate", "--config", "quickstart", words]) == 2
    printed = capsys.readouterr()
    form = configure("quickstart", overrides=[f"run.run_root={tmp_path}", words])
    assert printed.out == "" and printed.err.splitlines() == form.problems and len(form.problems) == 1
    assert main(["validate", "--config", "quickstart", words, "trainer.placement.colocate_all=false"]) == 0
    assert capsys.readouterr().out.startswith("ok: ")
    # run as a job on a cluster (Ray already joined here): the cluster-size rules as well, the engine's words
    monkeypatch.setattr(placement, "is_submitted_job", lambda: True)
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(placement, "cluster_resources", lambda: ClusterResources.from_nodes([{"CPU": 2.0}]))
    assert main(["validate", "--config", "quickstart", words, "trainer.placement.colocate_all=false"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.endswith("needs 3 CPU but the cluster has 2 CPU in all")
    monkeypatch.undo()
    if importlib.util.find_spec("wandb") is None:  # a tracker's package this machine lacks
        assert main(["validate", "--config", "quickstart", "trainer.logger=[console, wandb]"]) == 2
        assert capsys.readouterr().err.startswith("trainer.logger: 'wandb' needs the wandb package")
