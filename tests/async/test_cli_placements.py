"""The command line with each placement and schedule: colocated sync, disaggregated one-step async, and a
placement the cluster cannot hold (slow: real Ray runs)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from engine_runs import run_train

pytestmark = pytest.mark.slow

SMALL = [
    "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=16",
    "generator.n_samples_per_prompt=4", "generator.sampling_params.max_generate_length=4",
    "generator.eval_sampling_params.max_generate_length=4", "trainer.eval_interval=0",
    "trainer.eval_before_train=false", "trainer.num_threads=1", "trainer.ckpt_interval=0",
    "trainer.max_training_steps=4",
]
WAIT_KEYS = ("timing/wait_for_batch", "timing/wait_for_policy")
ASYNC_KEYS = ("async/staleness_mean", "async/staleness_max")


def run_cli(run_root: Path, run_id: str, model: str, *extra: str) -> subprocess.CompletedProcess:
    """``python -m skyrl_engine train --config quickstart`` with SMALL settings, to the end."""
    return run_train(run_root, run_id, model, *SMALL, *extra)


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_colocated_sync_records_zero_waits(tmp_path, tiny_model_dir) -> None:
    done = run_cli(tmp_path, "colocated", tiny_model_dir, "trainer.placement.colocate_all=true")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "placement: colocated" in done.stdout and "(sync)" in done.stdout
    rows = metrics(tmp_path / "colocated")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        assert all(row[key] == 0.0 for key in WAIT_KEYS)
        assert not any(key in row for key in ASYNC_KEYS)


def test_disaggregated_one_step_async_with_a_critic_through_the_cli(tmp_path, tiny_model_dir) -> None:
    """The CLI's wiring of the disaggregated placement and the one-step schedule, in one real run: generator, policy
    and critic as Ray actors of a local Ray the run starts itself, eval and a checkpoint at its last step. Every
    estimator x placement x schedule pairing is walked by tests/engine/test_combination_matrix.py."""
    done = run_cli(tmp_path, "async", tiny_model_dir, "trainer.placement.colocate_all=false",
                   "trainer.async_one_step=true", "trainer.max_training_steps=3",
                   "trainer.algorithm.advantage_estimator=gae", "trainer.critic_mini_batch_size=4",
                   "trainer.eval_interval=3", "trainer.eval_batch_size=16", "data.val_data=[builtin://arithmetic/test]",
                   "trainer.ckpt_interval=3")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "placement: disaggregated" in done.stdout and "(one_step)" in done.stdout
    run = tmp_path / "async"
    rows = metrics(run)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["async/staleness_max"] for r in rows] == [0, 1, 1]
    for row in rows:
        assert all(key in row for key in WAIT_KEYS + ASYNC_KEYS + ("timing/sync_weights", "timing/step"))
        assert row["timing/critic_train"] > 0 and "critic/critic_loss" in row  # the critic actor trained
    assert "eval/all/avg_score" in rows[-1] and rows[-1]["timing/sync_weights"] > 0
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "succeeded" and status["step"] == 3 and status["total_steps"] == 3
    assert (run / "checkpoints" / "latest_ckpt_global_step.txt").read_text() == "3"
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    first = [e for e in events if e["kind"] != "stage"][0]  # the stages of the first minute come before it
    assert first["kind"] == "started" and first["pipeline"] == "one_step"
    # the roles ran as Ray actors, not in the in-process fallback
    assert not [e for e in events if "local Ray did not start" in e.get("message", "")], events


def test_placement_the_cluster_cannot_hold_fails_in_one_line(tmp_path, tiny_model_dir) -> None:
    # 16 policy ranks, one CPU each (the mini-batch's 16 rows split across them): valid, but 17 CPUs
    done = run_cli(tmp_path, "too-big", tiny_model_dir, "trainer.placement.colocate_all=false",
                   "trainer.placement.policy_num_gpus_per_node=16")
    assert done.returncode == 1
    status = json.loads((tmp_path / "too-big" / "status.json").read_text())
    assert status["state"] == "failed"
    error = status["error"]
    assert error.startswith("PlacementError: trainer.placement: disaggregated: policy 1 node(s) × 16 CPU")
    assert "needs 17 CPU but the cluster has" in error and "\n" not in error
