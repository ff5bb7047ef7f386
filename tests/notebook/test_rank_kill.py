"""Kill -9 of one policy rank of a real job (issue 12): the job fails naming the dead rank, and
``job.resume()`` continues from the last checkpoint with every step exactly once.

The job is the real engine (not ``fake_engine``) on the session's real Ray head (token auth, 2 CPUs),
submitted through the Jobs API: two FSDP2 policy ranks sharing two colocated CPU bundles with the
generator, checkpoints every 2 steps of 24 (sharded: each rank writes its own optimizer shard).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

STEPS = 24  # steps take ~0.1-0.4 s: the kill must land while many are left (4 once all ran before it)
RANKED = ["trainer.placement.policy_num_gpus_per_node=2", "generator.inference_engine.num_engines=2",
          "trainer.ckpt_interval=2", f"trainer.max_training_steps={STEPS}", "trainer.eval_before_train=false",
          "trainer.eval_interval=0", "trainer.num_threads=1"]


def _event(job: Any, kind: str, step: int | None = None, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in job.run.events():
            if event["kind"] == kind and (step is None or event.get("step") == step):
                return event
        state = job.status()
        assert state in ("pending", "running"), f"job {state} before its {kind} event: {job.logs(tail=30)}"
        time.sleep(0.3)
    raise AssertionError(f"no {kind} event (step {step}) within {timeout} s: {job.logs(tail=30)}")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_kill_9_of_one_rank_fails_the_job_naming_it_and_resume_runs_each_step_once(
        ray_cluster: Any, private_model_cache: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray_cluster, "engine_module", "skyrl_engine")  # the real engine, not fake_engine
    job = ray_cluster.launch("quickstart", overrides=[*RANKED, f"run.run_root={tmp_path}"], run_id="rankkill",
                             runtime_env={"env_vars": {"SKYRL_NB_CACHE": private_model_cache}})
    started = _event(job, "started")
    ranks = started["policy_ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and {r["strategy"] for r in ranks} == {"fsdp2"}
    _event(job, "checkpoint_saved", step=2)
    os.kill(int(ranks[1]["pid"]), signal.SIGKILL)

    assert job.wait(timeout=180, poll_s=0.5) == "failed", job.logs(tail=40)
    error = job.run.status()["error"]
    assert "rank 1 died" in error and "PolicyWorker × 2" in error, error
    done_before = [m["step"] for m in job.run.metrics()]
    assert done_before and done_before[-1] < STEPS, done_before
    policy_dir = tmp_path / "rankkill" / "checkpoints" / "global_step_2" / "policy"
    assert {"optim_world_size_2_rank_0.pt", "optim_world_size_2_rank_1.pt", "model.safetensors"} <= set(
        os.listdir(policy_dir))

    resumed = job.resume()
    assert resumed.wait(timeout=300, poll_s=0.5) == "succeeded", resumed.logs(tail=40)
    steps = [m["step"] for m in resumed.run.metrics()]
    assert steps == list(range(1, STEPS + 1)), steps  # each step exactly once
    (event,) = [e for e in resumed.run.events() if e["kind"] == "resumed"]
    assert event["step"] % 2 == 0 and 2 <= event["step"] <= done_before[-1], (event, done_before)
    assert [r["rank"] for r in event["policy_ranks"]] == [0, 1]
    assert {r["pid"] for r in event["policy_ranks"]}.isdisjoint({r["pid"] for r in ranks})  # new processes
