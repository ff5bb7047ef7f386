"""One training step in-process: weights move, the run store gets metrics and a Parquet part."""

from __future__ import annotations

import torch

from skyrl_core.config import load_config
from skyrl_core.runs import RunReader, RunWriter
from skyrl_engine import checkpoint
from skyrl_engine.tasks import load_prompts
from skyrl_engine.trainer import RLTrainer
from skyrl_engine.workers import Workers

STEP_KEYS = [
    "reward/avg_raw_reward", "reward/std_raw_reward", "reward/avg_pass_at_4", "generate/avg_num_tokens",
    "policy/policy_loss", "policy/policy_entropy", "policy/grad_norm", "policy/policy_kl",
    "policy/loss_metrics/clip_ratio", "policy/lr", "trainer/tokens_per_second", "timing/step",
    "timing/generate", "timing/policy_train", "timing/sync_weights", "timing/save_checkpoints",
    "policy/rollout_train_logprobs_abs_diff_max", "policy/rollout_train_logprobs_abs_diff_mean",
]
COLUMNS = ["step", "uid", "group", "prompt", "response", "reward", "advantage", "num_tokens",
           "finish_reason", "env_class", "data_source", "token_ids", "token_logprobs", "token_advantages"]


def _cfg(tmp_path, model_dir, *extra):
    return load_config("quickstart", [
        f"trainer.policy.model.path={model_dir}", f"run.run_root={tmp_path}", "run.run_id=unit",
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=2", "trainer.micro_train_batch_size_per_gpu=4",
        "generator.n_samples_per_prompt=4", "trainer.max_training_steps=2", "trainer.eval_interval=2",
        "trainer.eval_batch_size=16", "trainer.ckpt_interval=1", "trainer.num_threads=1",
        "generator.sampling_params.max_generate_length=4", "trainer.policy.optimizer_config.lr=1e-3",
        "generator.eval_sampling_params.max_generate_length=4",
        *extra,
    ])


def _trainer(cfg, model_dir):
    train = load_prompts(cfg.data.train_data, "arithmetic")
    val = load_prompts(cfg.data.val_data, "arithmetic")[:16]
    workers = Workers.create(cfg, model_dir, cfg.total_steps(len(train)), in_process=True)
    return RLTrainer(cfg, RunWriter(cfg.run_dir), workers, train, val), workers


def test_one_step_changes_weights_and_writes_the_run_store(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, "trainer.algorithm.use_kl_loss=true", "trainer.algorithm.use_entropy_loss=true")
    trainer, workers = _trainer(cfg, tiny_model_dir)
    before = {k: v.clone() for k, v in workers.policy.worker.model.state_dict().items()}
    metrics = trainer.train_one_step(1)
    after = workers.policy.worker.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    # the generator got the new weights
    gen = workers.generator.worker.backend.model.state_dict()
    assert all(torch.equal(gen[k], after[k]) for k in after)
    for key in STEP_KEYS:
        assert key in metrics, key
    # The sampler and the trainer run the same weights (the sampler with a KV cache): float noise only.
    assert 0 <= metrics["policy/rollout_train_logprobs_abs_diff_mean"] <= metrics["policy/rollout_train_logprobs_abs_diff_max"] < 1e-4
    reader = RunReader(cfg.run_dir)
    (row,) = reader.metrics()
    assert row["step"] == 1 and row["reward/avg_raw_reward"] == metrics["reward/avg_raw_reward"]
    frame = reader.trajectories(1)
    assert len(frame) == 16 and all(c in frame.columns for c in COLUMNS)
    assert set(frame["finish_reason"]) <= {"stop", "length"}
    # each sample carries its prompt's expected answer (the inspector shows it beside the reward)
    assert frame["ground_truth"].map(lambda gt: isinstance(gt, str) and gt.isdigit()).all()
    rewarded = frame[frame["reward"] == 1.0]
    assert all(r.strip().startswith(gt) for r, gt in zip(rewarded["response"], rewarded["ground_truth"], strict=True))
    assert (frame["num_tokens"] == frame["token_ids"].map(len)).all()
    # a checkpoint in SkyRL's layout
    root = str(cfg.run_dir / "checkpoints")
    assert checkpoint.latest_step(root) == 1
    for name in ("model.safetensors", "config.json", "optim_world_size_1_rank_0.pt",
                 "extra_state_world_size_1_rank_0.pt", "fsdp_config.json"):
        assert (cfg.run_dir / "checkpoints" / "global_step_1" / "policy" / name).exists(), name
    assert checkpoint.read_trainer_state(checkpoint.step_dir(root, 1))["data_position"] == {"epoch": 0, "batch_in_epoch": 1}
    # After the sync, step 2's samples come from the updated weights, and the trainer agrees again.
    assert trainer.train_one_step(2)["policy/rollout_train_logprobs_abs_diff_max"] < 1e-4


def test_full_loop_with_eval_and_checkpoint_pruning(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, "trainer.max_training_steps=3", "trainer.max_ckpts_to_keep=1",
               "trainer.algorithm.advantage_estimator=rloo", "trainer.update_epochs_per_batch=2")
    trainer, _ = _trainer(cfg, tiny_model_dir)
    trainer.train()
    reader = RunReader(cfg.run_dir)
    assert [m["step"] for m in reader.metrics()] == [1, 2, 3]
    assert "eval/all/avg_score" in reader.metrics()[1]
    kinds = [e["kind"] for e in reader.events()]
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("eval") == 3  # 0, 2, 3
    # what the dashboard shows before step 1
    assert [e["stage"] for e in reader.events() if e["kind"] == "stage"] == ["first_eval", "first_rollout"]
    assert reader.status()["state"] == "succeeded" and reader.status()["step"] == 3
    assert sorted(p.name for p in (cfg.run_dir / "checkpoints").iterdir() if p.name.startswith("global")) == ["global_step_3"]
    assert reader.trajectory_steps() == [1, 2, 3]


def test_off_policy_correction_sees_the_samplers_log_probs(tmp_path, tiny_model_dir):
    """Synchronous rollouts come from the trainer's own weights, so the TIS ratio is 1 up to rounding."""
    cfg = _cfg(tmp_path, tiny_model_dir, "trainer.algorithm.off_policy_correction.tis_ratio_type=sequence")
    trainer, _ = _trainer(cfg, tiny_model_dir)
    metrics = trainer.train_one_step(1)
    assert abs(metrics["policy/loss_metrics/is_ratio_mean"] - 1.0) < 1e-4
    assert abs(metrics["policy/loss_metrics/is_ratio_max"] - 1.0) < 1e-3
    assert metrics["policy/loss_metrics/tis_seq_clip_high_ratio"] == 0.0
