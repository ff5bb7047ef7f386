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


def test_two_problems_both_show_one_line_each_without_env_paths(tmp_path: Path) -> None:
    """A cluster whose package answer (cached on it: no probe here) says SkyRL fails to import with a multi-line
    error quoting its env, and wandb is missing: the form shows both lines beside Launch (no "(+1 more)"), each
    on one line, the env path left out; launch refuses with the same two lines."""
    import skyrl_nb
    from skyrl_core.config import ConfigError
    from skyrl_nb.cluster.base import Cluster

    cluster = Cluster("http://127.0.0.1:9", token="t", name="canned")
    cluster.node_resources = lambda: [{"CPU": 8.0, "GPU": 1.0, "memory": 64.0 * 2**30}]
    cluster.runs_here = True  # the run root is this machine's disk: no run-root probe job
    error = "ImportError: libcudart.so.12: cannot open shared object file\n  File \"/opt/envs/.venv-skyrl/lib/" \
            "python3.12/site-packages/torch/__init__.py\", line 290"
    cluster._package_report = {"python": "3.12.3", "vllm": "missing", "modules": {"wandb": False},
                               "skyrl": {"python": "3.12.3", "skyrl": "0.4.0", "error": error}}
    overrides = [f"run.run_root={tmp_path}", "run.engine=skyrl", "trainer.logger=[console, wandb]"]
    form = skyrl_nb.configure("quickstart", overrides=overrides, cluster=cluster)
    assert [line.split(":")[0] for line in form.problems] == ["run.engine", "trainer.logger"], form.problems
    assert "libcudart.so.12: cannot open shared object file File \"…\", line 290" in form.problems[0]
    assert all("\n" not in line and "site-packages" not in line and ".venv" not in line for line in form.problems)
    shown = form.view.launch_reason.value.replace("&#x27;", "'").replace("&quot;", '"')
    assert shown.count("<span") == 2 and "more)" not in shown
    assert "Launch is off: run.engine: 'skyrl' needs SkyRL's trainer" in shown and "'wandb' needs the wandb" in shown
    with pytest.raises(ConfigError) as refused:
        cluster.launch("quickstart", overrides=overrides, run_id="two")
    assert refused.value.problems == form.problems and not (tmp_path / "two").exists()
