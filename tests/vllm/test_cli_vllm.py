"""``python -m skyrl_engine train`` with ``generator.inference_engine.backend=vllm`` (slow: vLLM-CPU engines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_cli_trains_with_vllm_engines(vllm_python, tiny_model_dirs, tmp_path) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SKYRL_VLLM_PYTHON": vllm_python}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={tmp_path}",
         "run.run_id=vllm", f"trainer.policy.model.path={tiny_model_dirs[0]}",
         "generator.inference_engine.backend=vllm", "trainer.max_training_steps=2",
         "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=16",
         "generator.n_samples_per_prompt=4", "generator.sampling_params.max_generate_length=6",
         "trainer.eval_interval=0", "trainer.eval_before_train=false", "trainer.ckpt_interval=0",
         "trainer.num_threads=1"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"vllm: engines run in {vllm_python}" in done.stdout
    rows = [json.loads(line) for line in (tmp_path / "vllm" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        assert row["timing/sync_weights"] > 0 and row["timing/wait_for_batch"] == 0.0
        assert "reward/avg_raw_reward" in row and "policy/policy_loss" in row


def test_missing_vllm_python_is_one_line(tiny_model_dirs, tmp_path) -> None:
    env = {**os.environ, "SKYRL_VLLM_PYTHON": str(tmp_path / "no-such-python")}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={tmp_path}",
         "run.run_id=novllm", f"trainer.policy.model.path={tiny_model_dirs[0]}",
         "generator.inference_engine.backend=vllm", "trainer.max_training_steps=1"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 1
    error = json.loads((tmp_path / "novllm" / "status.json").read_text())["error"]
    assert error.startswith("RuntimeError: SKYRL_VLLM_PYTHON: ") and "does not exist" in error
