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


def test_disaggregated_one_step_async_stays_within_one(tmp_path, tiny_model_dir) -> None:
    # gae: the critic actor trains on the trainer's side of the pipeline, on the batch one step stale
    done = run_cli(tmp_path, "async", tiny_model_dir, "trainer.placement.colocate_all=false",
                   "trainer.async_one_step=true", "trainer.algorithm.advantage_estimator=gae",
                   "trainer.critic_mini_batch_size=4")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "placement: disaggregated" in done.stdout and "(one_step)" in done.stdout
    rows = metrics(tmp_path / "async")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    assert [r["async/staleness_max"] for r in rows] == [0, 1, 1, 1]
    for row in rows:
        assert all(key in row for key in WAIT_KEYS + ASYNC_KEYS + ("timing/sync_weights", "timing/step"))
        assert row["critic/critic_loss"] > 0 and row["timing/critic_train"] > 0
    events = [json.loads(line) for line in (tmp_path / "async" / "events.jsonl").read_text().splitlines()]
    assert events[0]["kind"] == "started" and events[0]["pipeline"] == "one_step"
    assert json.loads((tmp_path / "async" / "status.json").read_text())["state"] == "succeeded"
    # the notebook's dashboard draws both waits as parts of the step-time bars, from this run store
    from skyrl_nb.dashboard import Dashboard

    dash = Dashboard(tmp_path / "async", static=False)
    dash.widget()
    dash.refresh()
    timing = {s["name"]: s for s in dash._charts["timing"].series}
    for part in ("wait for batch", "wait for policy"):
        assert part in timing and [p[0] for p in timing[part]["points"]] == [1, 2, 3, 4], part
    assert "wait for policy" in dash.to_svg()


def test_placement_the_cluster_cannot_hold_fails_in_one_line(tmp_path, tiny_model_dir) -> None:
    done = run_cli(tmp_path, "too-big", tiny_model_dir, "trainer.placement.colocate_all=false",
                   "trainer.placement.policy_num_gpus_per_node=512")
    assert done.returncode == 1
    status = json.loads((tmp_path / "too-big" / "status.json").read_text())
    assert status["state"] == "failed"
    error = status["error"]
    assert error.startswith("PlacementError: trainer.placement: disaggregated: policy 1 node(s) × 512 CPU")
    assert "needs 513 CPU but the cluster has" in error and "\n" not in error
