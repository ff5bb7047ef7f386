"""``python -m skyrl_engine train ... advantage_estimator=gae`` on Ray: critic metrics and checkpoint (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SMALL = [
    "trainer.algorithm.advantage_estimator=gae",
    "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.critic_mini_batch_size=2",
    "trainer.micro_train_batch_size_per_gpu=16", "generator.n_samples_per_prompt=4",
    "generator.sampling_params.max_generate_length=4", "trainer.eval_interval=0", "trainer.eval_before_train=false",
    "trainer.num_threads=1", "trainer.max_training_steps=3", "trainer.ckpt_interval=3",
]


@pytest.mark.slow
def test_gae_quickstart_on_ray_writes_critic_metrics_and_checkpoint(tmp_path, tiny_model_dir):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    args = [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={tmp_path}",
            "run.run_id=gae", f"trainer.policy.model.path={tiny_model_dir}", *SMALL]
    proc = subprocess.run(args, env=env, capture_output=True, text=True, timeout=600, start_new_session=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    run = tmp_path / "gae"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        for key in ("critic/critic_loss", "critic/values_mean", "critic/values_clipfrac", "critic/grad_norm"):
            assert key in row, key
    assert (run / "checkpoints" / "global_step_3" / "critic" / "model.safetensors").exists()
    events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if "local Ray did not start" in e.get("message", "")], events  # the critic was an actor
