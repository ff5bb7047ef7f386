"""Seven launches this machine's local cluster cannot run (issue 33): `Cluster.launch` refuses each before
anything is submitted or written, with the lines the config form shows for the same config on the same
cluster. Each used to be submitted and fail 4-17 s later, leaving a failed run folder behind.

The session's real local Ray head (2 CPUs, no GPU; tests/notebook/conftest.py) runs its jobs with this very
interpreter, so its package questions (vLLM, SkyRL, wandb) are answered here without a probe job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

SEVEN: dict[str, list[str]] = {
    "vllm backend without vLLM": ["generator.inference_engine.backend=vllm"],
    "policy ranks > CPUs, colocated": ["trainer.placement.policy_num_gpus_per_node=4",
                                       "generator.inference_engine.num_engines=4"],
    "policy ranks > CPUs, not colocated": ["trainer.placement.colocate_all=false",
                                           "trainer.placement.policy_num_gpus_per_node=4"],
    "more policy nodes than the cluster has": ["trainer.placement.colocate_all=false",
                                               "trainer.placement.policy_num_nodes=2"],
    "engines > slots": ["trainer.placement.colocate_all=false", "generator.inference_engine.num_engines=2"],
    "run.engine=skyrl without SkyRL": ["run.engine=skyrl"],
    "trainer.logger wandb without wandb": ["trainer.logger=[console, wandb]"],
}
EXPECTED_KEY = {  # the key each refusal starts with
    "vllm backend without vLLM": "generator.inference_engine.backend",
    "policy ranks > CPUs, colocated": "trainer.placement",
    "policy ranks > CPUs, not colocated": "trainer.placement",
    "more policy nodes than the cluster has": "trainer.placement",
    "engines > slots": "trainer.placement",
    "run.engine=skyrl without SkyRL": "run.engine",
    "trainer.logger wandb without wandb": "trainer.logger",
}


def _missing_here() -> set[str]:
    """Which of the packages the seven need this interpreter lacks (a case whose package is here is skipped)."""
    import importlib.metadata
    import importlib.util

    from skyrl_engine.vllm_engine import find_vllm_python

    missing = set()
    try:
        find_vllm_python()
    except RuntimeError:
        missing.add("vllm")
    try:
        importlib.metadata.version("skyrl")
    except importlib.metadata.PackageNotFoundError:
        missing.add("skyrl")
    if importlib.util.find_spec("wandb") is None:
        missing.add("wandb")
    return missing


@pytest.mark.timeout(300)
def test_seven_impossible_launches_are_refused_before_anything_is_submitted(ray_cluster: Any, tmp_path: Path) -> None:
    import skyrl_nb
    from skyrl_core.config import ConfigError

    assert ray_cluster.resources()["CPU"] == 2.0 and ray_cluster.resources()["GPU"] == 0.0
    missing = _missing_here()
    needs = {"vllm backend without vLLM": "vllm", "run.engine=skyrl without SkyRL": "skyrl",
             "trainer.logger wandb without wandb": "wandb"}
    cases = {name: words for name, words in SEVEN.items() if needs.get(name, "") in missing | {""}}
    assert len(cases) >= 5, f"this machine has {set(needs.values()) - missing}: too few impossible launches left"
    ray_cluster._package_report = None  # ask afresh: the answer is cached on the cluster object
    jobs_before = {job.submission_id for job in ray_cluster.client.list_jobs()}
    for i, (name, words) in enumerate(cases.items()):
        overrides = [f"run.run_root={tmp_path}", *words]
        form = skyrl_nb.configure("quickstart", overrides=overrides, cluster=ray_cluster)
        assert form.problems and form.view.launch.disabled, name
        with pytest.raises(ConfigError) as refused:
            ray_cluster.launch("quickstart", overrides=overrides, run_id=f"refused-{i}")
        lines = refused.value.problems
        assert lines == form.problems, (name, lines, form.problems)  # the form's lines, word for word
        assert lines[0].startswith(EXPECTED_KEY[name] + ":") or lines[0].startswith(EXPECTED_KEY[name] + "."), lines
        for line in lines:  # one line each, no internal path, every one shown beside Launch
            assert "\n" not in line and "site-packages" not in line and ".venv" not in line, line
        shown = form.view.launch_reason.value.replace("&#x27;", "'")
        assert shown.count("<span") == len(lines) and "more)" not in shown, shown
        assert not (tmp_path / f"refused-{i}").exists(), name  # no run folder left behind
    assert list(tmp_path.iterdir()) == []
    # no Ray job of any kind was submitted: neither a run nor a probe
    assert {job.submission_id for job in ray_cluster.client.list_jobs()} == jobs_before
    assert ray_cluster._package_report is not None and ray_cluster._package_report["asked"] == "here"
