"""A job killed without a word (kill -9) is `lost` at once, not after the 120-s heartbeat.

Its status.json still says `running`; what tells is Ray (the job failed) or, for a cluster on this
machine, the engine's pid recorded in status.json being gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_process_gone() -> None:
    from skyrl_nb.jobs import process_gone

    now = time.time()
    assert process_gone({"state": "running", "pid": os.getpid(), "heartbeat": now}) is None
    assert "is gone" in (process_gone({"state": "running", "pid": _dead_pid(), "heartbeat": now}) or "")
    # a pid handed to a process that started after the run's last heartbeat is not the run's
    reused = process_gone({"state": "running", "pid": os.getpid(), "heartbeat": now - 3600})
    assert reused is not None and "another process" in reused
    for odd in (None, "12", True, -1, 0):
        assert process_gone({"state": "running", "pid": odd, "heartbeat": now}) is None


class _Client:
    """Ray's job client, answering one JobDetails."""

    def __init__(self, status: str, message: str = "") -> None:
        self.details = SimpleNamespace(status=status, message=message, start_time=(time.time() - 60) * 1000)

    def get_job_info(self, submission_id: str) -> Any:
        return self.details


def _job(tmp_path: Path, ray_status: str, run_status: dict[str, Any], *, here: bool = True) -> Any:
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.jobs import Job

    cluster = Cluster("http://127.0.0.1:9", token="t")
    cluster.runs_here = here
    cluster._client_obj = _Client(ray_status, "Job entrypoint command failed with exit code -9")
    run_dir = tmp_path / "r"
    run_dir.mkdir(exist_ok=True)
    (run_dir / "status.json").write_text(json.dumps({"step": 3, "total_steps": 9, **run_status}))
    return Job(cluster, submission_id="r", run_id="r", run_dir=str(run_dir))


def test_status_says_lost_from_ray_or_the_process_table(tmp_path: Path) -> None:
    now = time.time()
    running_dead = {"state": "running", "pid": _dead_pid(), "heartbeat": now}
    # Ray still says RUNNING, but the engine's process on this machine is gone
    state, why = _job(tmp_path, "RUNNING", running_dead).status_detail()
    assert state == "lost" and "pid" in why
    # ... a remote cluster's pid means nothing here
    assert _job(tmp_path, "RUNNING", running_dead, here=False).status() == "running"
    # Ray says FAILED while the run store says running: lost, with Ray's message
    state, why = _job(tmp_path, "FAILED", {"state": "running", "pid": os.getpid(), "heartbeat": now}).status_detail()
    assert state == "lost" and "exit code -9" in why
    # the engine recorded its own end: Ray's word stands
    assert _job(tmp_path, "FAILED", {"state": "failed", "heartbeat": now}).status() == "failed"
    assert _job(tmp_path, "STOPPED", {**running_dead}).status() == "stopped"
    # status.json older than this submission (a resume that died at once) is not this job's word
    assert _job(tmp_path, "FAILED", {**running_dead, "heartbeat": now - 3600}).status() == "failed"
    # alive and well
    assert _job(tmp_path, "RUNNING", {"state": "running", "pid": os.getpid(), "heartbeat": now}).status() == "running"
    job = _job(tmp_path, "FAILED", {"state": "running", "pid": os.getpid(), "heartbeat": now})
    assert job.wait(timeout=1) == "lost" and "lost" in repr(job)


@pytest.mark.timeout(120)
def test_kill_9_is_lost_within_10_s(ray_cluster: Any, shell: Any, tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard

    runs = tmp_path / "runs"
    job = ray_cluster.launch("quickstart", overrides=["trainer.max_training_steps=300", f"run.run_root={runs}"],
                             run_id="lost-1", runtime_env={"env_vars": {"FAKE_ENGINE_STEP_S": "0.5"}})
    deadline = time.time() + 60
    status: dict[str, Any] = {}
    while time.time() < deadline:
        status = json.loads((runs / "lost-1" / "status.json").read_text())
        if status.get("state") == "running" and status.get("pid"):
            break
        time.sleep(0.2)
    assert status.get("state") == "running", status
    os.kill(int(status["pid"]), signal.SIGKILL)
    killed = time.monotonic()
    while job.status() not in ("lost", "failed"):
        assert time.monotonic() - killed < 10, f"still {job.status()} 10 s after kill -9"
        time.sleep(0.2)
    assert json.loads((runs / "lost-1" / "status.json").read_text())["state"] == "running"  # the engine said nothing
    assert job.status() == "lost"
    dash = Dashboard(job, static=True)
    dash.refresh()
    assert dash.state == "lost" and dash.finished and dash.error
    shell.user_ns["c"] = ray_cluster
    shell.run_line_magic("config", "SkyrlMagics.cluster = 'c'")
    assert "state='lost'" in repr(shell.run_line_magic("skyrl", "status lost-1"))
    (summary,) = shell.run_line_magic("skyrl", "list")
    assert summary.run_id == "lost-1" and summary.state == "lost"
    assert time.monotonic() - killed < 10
