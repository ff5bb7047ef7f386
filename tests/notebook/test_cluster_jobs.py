"""Jobs through the real Ray Jobs API on a real local cluster with token auth (one cluster per session)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

STEPS = ["trainer.max_training_steps=6"]


def test_token_file_is_private(ray_cluster: Any, nb_home: Path) -> None:
    token_path = nb_home / "config" / "ray_token"
    mode = stat.S_IMODE(token_path.stat().st_mode)
    assert mode == 0o600, oct(mode)
    token = token_path.read_text().strip()
    assert len(token) >= 32
    assert token not in repr(ray_cluster) and token not in ray_cluster._repr_html_()
    assert "hidden" in ray_cluster._repr_html_()


def test_client_without_token_is_refused(ray_cluster: Any, tmp_path: Path) -> None:
    import requests

    # Raw HTTP without a bearer token: 401; with a wrong one: 403.
    assert requests.get(ray_cluster.address + "/api/jobs/", timeout=30).status_code == 401
    bad = requests.get(ray_cluster.address + "/api/jobs/", headers={"Authorization": "Bearer nope"}, timeout=30)
    assert bad.status_code == 403
    # Ray's own SDK in a clean process (no token anywhere in its environment or home).
    code = ("from ray.job_submission import JobSubmissionClient\n"
            f"JobSubmissionClient({ray_cluster.address!r}).list_jobs()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(HOME=str(tmp_path), RAY_AUTH_MODE="token")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "token" in proc.stderr.lower() or "401" in proc.stderr
    # And our own client says why.
    from skyrl_nb.cluster import Cluster

    with pytest.raises(PermissionError, match="no token was given"):
        Cluster(ray_cluster.address).ping()
    with pytest.raises(PermissionError, match="not valid"):
        Cluster(ray_cluster.address, token="wrong").ping()


def test_connect_with_token_and_resources(ray_cluster: Any) -> None:
    from skyrl_nb.cluster import connect

    c = connect(ray_cluster.address, token=ray_cluster._token)
    res = c.resources()
    assert res["nodes"] == 1 and res["CPU"] == 2.0


def test_launch_wait_logs_run(ray_cluster: Any, tmp_path: Path) -> None:
    job = ray_cluster.launch("quickstart", overrides=[*STEPS, f"run.run_root={tmp_path}"], run_id="jobs-ok")
    assert job.submission_id == "jobs-ok"
    assert job.wait(timeout=180) == "succeeded"
    assert job.status() == "succeeded"
    assert "step 6 reward" in job.logs()
    assert job.logs(tail=1).strip().startswith("step 6")
    rows = job.run.metrics()
    assert [r["step"] for r in rows] == list(range(1, 7))
    assert job.run.status()["state"] == "succeeded"
    assert any(j.run_id == "jobs-ok" for j in ray_cluster.jobs())
    assert ray_cluster.job("jobs-ok").submission_id == "jobs-ok"
    html = job._repr_html_()
    assert "succeeded" in html and ray_cluster._token not in html
    from skyrl_core.runs import list_runs

    (summary,) = list_runs(tmp_path)
    assert summary.run_id == "jobs-ok" and summary.step == 6 and summary.last_reward is not None


@pytest.mark.slow
def test_dashboard_gains_points_while_job_runs(ray_cluster: Any, tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard

    job = ray_cluster.launch("quickstart", overrides=["trainer.max_training_steps=12", f"run.run_root={tmp_path}"],
                             run_id="jobs-live", runtime_env={"env_vars": {"FAKE_ENGINE_STEP_S": "0.6"}})
    dash = Dashboard(job, static=False)
    dash.widget()
    dash.start()
    seen: list[tuple[int, str]] = []
    deadline = time.time() + 180
    while time.time() < deadline and not dash.finished:
        seen.append((dash.points, job.status()))
        time.sleep(0.5)
    assert dash.wait(timeout=60) == "succeeded"
    running_points = [p for p, state in seen if state == "running" and p > 0]
    assert running_points and min(running_points) < 12, f"no points while running: {seen[-10:]}"
    assert len(set(running_points)) >= 2, "the curve did not grow while the job ran"
    assert dash.points == 12 and len(dash._charts["reward"].series[1]["points"]) == 12
    # The picture in the README comes from here.
    docs = Path(__file__).resolve().parents[2] / "docs" / "dashboard.svg"
    dash.save(docs)
    assert docs.stat().st_size < 80_000


@pytest.mark.slow
def test_stop_then_resume_same_run_dir(ray_cluster: Any, tmp_path: Path) -> None:
    job = ray_cluster.launch("quickstart", overrides=["trainer.max_training_steps=40", f"run.run_root={tmp_path}"],
                             run_id="jobs-resume", runtime_env={"env_vars": {"FAKE_ENGINE_STEP_S": "0.5",
                                                                              "FAKE_ENGINE_STOP_DELAY_S": "5"}})
    deadline = time.time() + 120
    while time.time() < deadline and len(job.run.metrics()) < 3:
        time.sleep(0.5)
    assert job.stop() is True
    assert job.wait(timeout=60) == "stopped"
    # a driver that takes 5 s to get to its stop (Ray's default grace before SIGKILL is 3 s) still records it
    assert job._run_status()["state"] == "stopped", job._run_status()
    done = len(job.run.metrics())
    assert 3 <= done < 40
    with pytest.raises(ValueError, match="already exists"):
        ray_cluster.launch("quickstart", overrides=[f"run.run_root={tmp_path}"], run_id="jobs-resume")
    resumed = job.resume(overrides=["trainer.max_training_steps=" + str(done + 2)])
    assert resumed.submission_id == "jobs-resume-r1" and resumed.run_dir == job.run_dir
    assert resumed.wait(timeout=120) == "succeeded"
    steps = [r["step"] for r in resumed.run.metrics()]
    assert steps == list(range(1, done + 3))
    assert ray_cluster.job("jobs-resume").submission_id == "jobs-resume-r1"
    # the resume's config came from Ray's job info (no file on this disk), and went with the submission
    assert job.submitted_config()["trainer"]["max_training_steps"] == 40
    resumed_config = resumed.submitted_config()["trainer"]
    assert resumed_config["resume_mode"] == "latest" and resumed_config["max_training_steps"] == done + 2
    assert not (Path(job.run_dir) / "launch").exists()


def test_failed_job_reports_error(ray_cluster: Any, tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard

    job = ray_cluster.launch("quickstart", overrides=[*STEPS, f"run.run_root={tmp_path}"], run_id="jobs-fail",
                             runtime_env={"env_vars": {"FAKE_ENGINE_FAIL": "1"}})
    assert job.wait(timeout=120) == "failed"
    dash = Dashboard(job, static=True)
    dash.refresh()
    assert dash.state == "failed" and "fake failure" in (dash.error or "")
    assert "fake failure" in dash.header()


def test_local_reuses_running_head(ray_cluster: Any, nb_home: Path) -> None:
    from skyrl_nb.cluster import local

    again = local(temp_dir=nb_home / "cache" / "ray", token_path=nb_home / "config" / "ray_token")
    assert again.pid == ray_cluster.pid and again.address == ray_cluster.address
    state = json.loads((nb_home / "cache" / "ray" / "skyrl-nb-head.json").read_text())
    assert state["pid"] == ray_cluster.pid


def test_studio_proxy_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from skyrl_nb.cluster.base import Cluster, display_dashboard_url

    monkeypatch.setenv("SKYRL_NB_STUDIO", "0")
    assert display_dashboard_url("http://127.0.0.1:8265") == "http://127.0.0.1:8265/"
    meta = tmp_path / "resource-metadata.json"
    meta.write_text(json.dumps({"DomainId": "d-abc123", "SpaceName": "me",
                                "ResourceArn": "arn:aws:sagemaker:us-west-2:123456789012:space/d-abc123/me"}))
    monkeypatch.delenv("SKYRL_NB_STUDIO")
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    monkeypatch.setenv("SKYRL_NB_STUDIO_METADATA", str(meta))
    assert (display_dashboard_url("http://127.0.0.1:8265")
            == "https://d-abc123.studio.us-west-2.sagemaker.aws/jupyterlab/default/proxy/8265/")
    meta.write_text("{}")
    assert Cluster("127.0.0.1:9999", token="t").dashboard_url == "/jupyterlab/default/proxy/9999/"
    # A remote address is never rewritten.
    assert Cluster("http://10.1.2.3:8265").dashboard_url == "http://10.1.2.3:8265/"
