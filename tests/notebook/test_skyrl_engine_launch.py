"""Launching ``run.engine: skyrl`` from the notebook: ``%skyrl launch --engine skyrl [--dry-run]`` (the dry run
prints exactly what launch submits), and the check that SkyRL's trainer imports on the cluster before a SkyRL
job goes there (``Cluster.plan`` and ``%skyrl launch``), against a canned job client (no Ray here)."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from IPython.core.error import UsageError


class ProbeClient:
    """A job client that answers the SkyRL probe job with ``probe_lines`` and records every submission."""

    def __init__(self, probe_lines: list[str], state: str = "SUCCEEDED"):
        self.submitted: list[dict[str, Any]] = []
        self.lines, self.state = probe_lines, state

    def submit_job(self, **kwargs: Any) -> str:
        self.submitted.append(kwargs)
        return kwargs["submission_id"]

    def get_job_status(self, submission_id: str) -> str:
        return self.state

    def get_job_logs(self, submission_id: str) -> str:
        return "\n".join(self.lines)

    def list_jobs(self) -> list[Any]:
        return []


def _answer(skyrl: dict[str, Any]) -> str:
    """The cluster's package probe's line (skyrl_nb.cluster.packages) with SkyRL's part ``skyrl``."""
    return json.dumps({"skyrl_nb_packages_probe": 1, "python": "3.12.3", "vllm": "missing", "skyrl": skyrl,
                       "modules": {"mlflow": False, "tensorboard": False, "wandb": False}})


GOOD = _answer({"python": "3.12.3", "skyrl": "0.4.0", "error": None})
OLDER = _answer({"python": "3.12.3", "skyrl": "0.3.0", "error": None})  # kept: the translation differs in one key
MISSING = _answer({"python": "3.12.3", "skyrl": None, "error": "the skyrl package is not installed"})


def _cluster(lines: list[str], state: str = "SUCCEEDED") -> Any:
    from skyrl_nb.cluster.base import Cluster

    cluster = Cluster("http://127.0.0.1:9", token="t", name="canned")
    cluster.runs_here = True  # the run root is this machine's disk: no run-root probe job
    cluster._client_obj = ProbeClient(lines, state)
    cluster._get = lambda path, timeout=10.0: {"data": {"result": {"result": [
        {"state": "ALIVE", "resources_total": {"CPU": 16.0, "GPU": 1.0, "memory": 64.0 * 2**30}}]}}}
    return cluster


@pytest.mark.parametrize("lines,state,fragment", [
    ([MISSING], "FAILED", "needs SkyRL's trainer on the cluster, and there it does not import (Python 3.12.3: the "
                          "skyrl package is not installed); pip install 'skyrl[fsdp]==0.4.0'"),
    ([GOOD.replace('"skyrl": "0.4.0"', '"skyrl": "0.2.0"')], "SUCCEEDED", "translated for SkyRL 0.3.x, 0.4.x; the "
                                                                         "cluster has SkyRL 0.2.0"),
    (["/usr/bin/python: No module named skyrl_engine"], "FAILED",
     "ended failed without an answer (its last line: /usr/bin/python: No module named skyrl_engine)"),
])
def test_plan_refuses_a_cluster_without_a_usable_skyrl(tmp_path: Path, lines: list[str], state: str,
                                                      fragment: str) -> None:
    from skyrl_core.config import ConfigError

    cluster = _cluster(lines, state)
    with pytest.raises(ConfigError) as info:
        cluster.plan("quickstart", overrides=[f"run.run_root={tmp_path}", "run.engine=skyrl"], code="installed")
    (line,) = info.value.problems
    assert line.startswith("run.engine: 'skyrl' ") and fragment in line, line
    (probe,) = cluster.client.submitted
    assert "skyrl_nb_packages_probe" in probe["entrypoint"]  # the one package probe answers SkyRL's question
    assert probe["metadata"] == {"skyrl_nb_probe": "1"}


def test_plan_says_which_skyrl_the_cluster_has_and_skyrl_nb_jobs_are_not_probed(tmp_path: Path) -> None:
    cluster = _cluster(["some log line", GOOD])
    plan = cluster.plan("quickstart", overrides=[f"run.run_root={tmp_path}", "run.engine=skyrl"], code="installed")
    assert plan.delivery["skyrl"] == "SkyRL 0.4.0 imports on the cluster (Python 3.12.3; checked by a probe job)"
    assert "skyrl: SkyRL 0.4.0 imports" in repr(plan)
    quiet = _cluster([GOOD])
    assert "skyrl" not in quiet.plan("quickstart", overrides=[f"run.run_root={tmp_path}"], code="installed").delivery
    assert quiet.client.submitted == []


def test_a_setting_skyrl_03_lacks_is_refused_on_a_03_cluster_in_one_line(tmp_path: Path) -> None:
    """SkyRL 0.3 is kept (its probe passes), but CISPO's sampler anchor is 0.4's: one line naming the release found."""
    from skyrl_core.config import ConfigError

    rollout = [f"run.run_root={tmp_path}", "run.engine=skyrl", "trainer.algorithm.policy_loss_type=cispo",
               "trainer.algorithm.cispo.cispo_anchor=rollout"]
    plan = _cluster([OLDER]).plan("quickstart", overrides=[f"run.run_root={tmp_path}", "run.engine=skyrl"],
                                  code="installed")
    assert plan.delivery["skyrl"].startswith("SkyRL 0.3.0 imports on the cluster")
    with pytest.raises(ConfigError) as info:
        _cluster([OLDER]).plan("quickstart", overrides=rollout, code="installed")
    (line,) = info.value.problems
    assert line.startswith("trainer.algorithm.cispo.cispo_anchor: rollout is not allowed with run.engine=skyrl on "
                           "SkyRL 0.3.0") and "allowed: old, or SkyRL 0.4.0 on the cluster" in line, line
    assert _cluster([GOOD]).plan("quickstart", overrides=rollout, code="installed").delivery["skyrl"]


def test_dry_run_prints_the_exact_command_launch_submits(shell: Any, tmp_path: Path, capsys: Any) -> None:
    cluster = _cluster([GOOD])
    shell.user_ns["canned"] = cluster
    line = "launch --cluster canned --engine skyrl --run-id s1 --no-dashboard trainer.max_training_steps=5"
    assert shell.run_line_magic("skyrl", line + " --dry-run") is None
    printed = capsys.readouterr().out.splitlines()
    assert cluster.client.submitted == [] and not (tmp_path / "runs" / "s1").exists()  # nothing submitted or written
    command, notes = printed[0], printed[1:]
    assert shlex.split(command)[:3] == [cluster.python, "-m", "skyrl_engine.skyrl_bridge"]
    assert "trainer.max_training_steps=5" in shlex.split(command)
    assert "# changed: generator.inference_engine.backend=vllm  [skyrl-nb 'torch': skyrl-nb's torch sampler is not " \
           "SkyRL's; SkyRL generates with vLLM]" in notes
    job = shell.run_line_magic("skyrl", line)
    probe, submitted = cluster.client.submitted
    assert "skyrl_nb_packages_probe" in probe["entrypoint"] and submitted["entrypoint"] == command
    assert submitted["submission_id"] == job.run_id == "s1"
    cfg = yaml.safe_load(submitted["runtime_env"]["env_vars"]["SKYRL_NB_CONFIG"])
    assert cfg["run"]["engine"] == "skyrl"


def test_launch_refuses_at_once_when_the_cluster_has_no_skyrl(shell: Any, tmp_path: Path) -> None:
    cluster = _cluster([MISSING], "FAILED")
    shell.user_ns["canned"] = cluster
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("skyrl", "launch --cluster canned --engine skyrl --run-id s2 --no-dashboard")
    assert str(info.value).startswith("run.engine: 'skyrl' needs SkyRL's trainer on the cluster")
    assert ["skyrl_nb_packages_probe" in s["entrypoint"] for s in cluster.client.submitted] == [True]


def test_engine_and_dry_run_options(shell: Any, capsys: Any) -> None:
    with pytest.raises(UsageError, match=r"--engine: 'skyrll' is not allowed; allowed: skyrl_nb, skyrl \(did you mean"):
        shell.run_line_magic("skyrl", "launch --engine skyrll --dry-run")
    with pytest.raises(UsageError, match="only go with launch"):
        shell.run_line_magic("skyrl", "status --dry-run")
    shell.run_line_magic("skyrl", "launch --dry-run --run-id plain")  # skyrl-nb's engine: its own command
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{shlex.quote(sys.executable)} -m skyrl_engine train --config env:SKYRL_NB_CONFIG"
    assert out[1].startswith("# the config travels in the job's runtime env as SKYRL_NB_CONFIG")


