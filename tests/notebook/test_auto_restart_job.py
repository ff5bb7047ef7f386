"""``trainer.max_restarts`` as the notebook sees it, through the real Jobs API (issue 37, item 6): while the
restart supervisor restarts a killed trainer the job never reads as ended or lost (``Job.status()``, the run's
status.json, the dashboard), and ``job.stop()`` (Ray's SIGTERM to the supervisor and the trainer at once) stops it
for good, without a restart.

The real engine (not ``fake_engine``) on the session's Ray head (token auth, 2 CPUs), every role in the trainer's
process. ~60 s here.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from skyrl_core.choices import FINAL_STATES

RUN = ["trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=16",
       "generator.n_samples_per_prompt=4", "trainer.eval_interval=0", "trainer.eval_before_train=false",
       "trainer.num_threads=1", "trainer.ckpt_interval=2", "trainer.max_training_steps=400", "trainer.max_restarts=2"]


def _events(job: Any, kind: str) -> list[dict[str, Any]]:
    return [e for e in job.run.events() if e["kind"] == kind]


def _wait_for(job: Any, kind: str, min_step: int = 0, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in _events(job, kind) if int(e.get("step") or 0) >= min_step]
        if found:
            return found[-1]
        assert job.status() in ("pending", "running"), job.logs(tail=30)
        time.sleep(0.3)
    raise AssertionError(f"no {kind} event within {timeout} s: {job.logs(tail=30)}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_restart_never_reads_as_an_end_and_a_stop_is_not_restarted(
        ray_cluster: Any, private_model_cache: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_core import procs
    from skyrl_nb.dashboard import Dashboard

    monkeypatch.setattr(ray_cluster, "engine_module", "skyrl_engine")  # the real engine, not fake_engine
    job = ray_cluster.launch("quickstart", overrides=[*RUN, f"run.run_root={tmp_path}"], run_id="autorestart",
                             runtime_env={"env_vars": {"SKYRL_NB_CACHE": private_model_cache}})
    _wait_for(job, "checkpoint_saved", min_step=2)
    supervisor = job.run.status()["pid"]
    (trainer,) = procs.children_of(supervisor)
    os.kill(trainer, signal.SIGKILL)

    board = Dashboard(job, static=True, charts=False)
    seen: set[tuple[str, str, bool]] = set()
    deadline = time.monotonic() + 240
    while not _events(job, "resumed") and time.monotonic() < deadline:
        board.refresh()
        seen.add((job.status(), job.run.status()["state"], board.finished))
        time.sleep(0.2)
    assert _events(job, "resumed"), job.logs(tail=30)
    assert {job_state for job_state, _, _ in seen} == {"running"}, seen  # never lost, failed or ended
    assert not {state for _, state, _ in seen} & set(FINAL_STATES) and not any(f for _, _, f in seen), seen
    assert job.run.status()["pid"] == supervisor and procs.alive(supervisor)
    (restarted,) = _events(job, "restarted")
    assert restarted["error_kind"] == "worker_died" and restarted["attempt"] == 1

    assert job.stop()
    assert job.wait(timeout=60, poll_s=0.5) == "stopped", job.logs(tail=30)
    status = job.run.status()
    if status["state"] != "stopped":
        pytest.fail(f"status {status} after the stop; the job's log ends:\n{job.logs(tail=80)}")
    assert status["restarts"] == 1, status
    assert len(_events(job, "restarted")) == 1 and "trainer attempt 2" not in job.logs()
    board.refresh()
    assert board.finished and board.note().startswith("restarted 1× (TrainerDied"), board.note()
