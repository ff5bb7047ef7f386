"""The critic behind ``advantage_estimator=gae``: it learns, it trains with the policy, it resumes exactly."""

from __future__ import annotations

import torch

from skyrl_core.config import load_config
from skyrl_core.runs import RunReader
from skyrl_engine import algorithms
from skyrl_engine.build import build
from skyrl_engine.critic import CriticWorker
from skyrl_engine.types import TrainBatch

CRITIC_KEYS = ["critic/critic_loss", "critic/values_mean", "critic/values_clipfrac", "critic/grad_norm",
               "critic/critic_lr", "timing/critic_train"]


def _cfg(tmp_path, model_dir, run_id="gae", *extra):
    return load_config("quickstart", [
        f"trainer.policy.model.path={model_dir}", f"run.run_root={tmp_path}", f"run.run_id={run_id}",
        "trainer.algorithm.advantage_estimator=gae",
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=2", "trainer.critic_mini_batch_size=2",
        "trainer.micro_train_batch_size_per_gpu=4", "generator.n_samples_per_prompt=4",
        "trainer.max_training_steps=2", "trainer.eval_interval=0", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=1", "trainer.num_threads=1",
        "generator.sampling_params.max_generate_length=4", "trainer.policy.optimizer_config.lr=1e-3",
        "trainer.critic.optimizer_config.lr=1e-3",
        *extra,
    ])


def _trainer(cfg, model_dir):
    engine = build(cfg, model_path=model_dir, val_rows=[], in_process=True)
    return engine.trainer, engine.workers


def _fixed_batch(vocab: int, seed: int = 0) -> TrainBatch:
    g = torch.Generator().manual_seed(seed)
    B, P, T = 8, 5, 6
    sequences_BL = torch.randint(3, vocab, (B, P + T), generator=g)
    response_mask_BT = torch.ones(B, T, dtype=torch.long)
    response_mask_BT[B // 2:, T - 2:] = 0  # some responses end early
    attention_mask_BL = torch.cat([torch.ones(B, P, dtype=torch.long), response_mask_BT], dim=1)
    returns_BT = torch.where(torch.arange(B)[:, None] % 2 == 0, 1.0, -0.5).expand(B, T) * response_mask_BT
    return TrainBatch(sequences_BL=sequences_BL, attention_mask_BL=attention_mask_BL, response_mask_BT=response_mask_BT,
                      advantages_BT=torch.zeros(B, T), rollout_logprobs_BT=torch.zeros(B, T), group_size=4,
                      returns_BT=returns_BT.clone())


def test_value_loss_decreases_on_a_fixed_batch(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir, "gae", "trainer.critic_mini_batch_size=2", "trainer.train_batch_size=2")
    critic = CriticWorker(tiny_model_dir, cfg.trainer, total_steps=40, num_threads=1)
    batch = _fixed_batch(critic.model.body.config.vocab_size)
    mask_BT = batch.response_mask_BT.float()

    def mse() -> float:
        return 0.5 * algorithms.masked_mean((critic.compute_values(batch) - batch.returns_BT) ** 2, mask_BT).item()

    before = mse()
    losses = []
    for _ in range(30):  # as in training: old values from a fresh forward, then the clipped update
        batch.values_BT = critic.compute_values(batch) * mask_BT
        losses.append(critic.train_step(batch)["critic/critic_loss"])
    after = mse()
    assert after < 0.1 * before, (before, after, losses)
    assert losses[-1] < losses[0]


def test_a_gae_step_trains_critic_and_policy_and_checkpoints_both(tmp_path, tiny_model_dir):
    cfg = _cfg(tmp_path, tiny_model_dir)
    trainer, workers = _trainer(cfg, tiny_model_dir)
    critic_before = {k: v.clone() for k, v in workers.critic.worker.model.state_dict().items()}
    metrics = trainer.train_one_step(1)
    for key in CRITIC_KEYS:
        assert key in metrics, key
    assert metrics["critic/critic_loss"] > 0 and 0 <= metrics["critic/values_clipfrac"] <= 1
    after = workers.critic.worker.model.state_dict()
    assert any(not torch.equal(critic_before[k], after[k]) for k in after)
    (row,) = RunReader(cfg.run_dir).metrics()
    assert row["critic/critic_loss"] == metrics["critic/critic_loss"]
    critic_dir = cfg.run_dir / "checkpoints" / "global_step_1" / "critic"
    for name in ("model.safetensors", "optim_world_size_1_rank_0.pt", "extra_state_world_size_1_rank_0.pt"):
        assert (critic_dir / name).exists(), name


def test_resume_with_a_critic_is_exact(tmp_path, tiny_model_dir):
    steps = ["trainer.max_training_steps=4", "trainer.ckpt_interval=2", "trainer.resume_mode=latest"]
    straight, _ = _trainer(cfg := _cfg(tmp_path, tiny_model_dir, "straight", *steps), tiny_model_dir)
    straight.train()

    cut_cfg = _cfg(tmp_path, tiny_model_dir, "cut", *steps)
    first, _ = _trainer(cut_cfg, tiny_model_dir)
    assert first.restore() == 0
    for step in (1, 2, 3):  # dies after step 3: its metrics are written, its checkpoint (step 4) is not
        first.train_one_step(step)
    second, _ = _trainer(cut_cfg, tiny_model_dir)  # fresh workers: everything comes from the checkpoint
    second.train()
    assert [m["step"] for m in RunReader(cut_cfg.run_dir).metrics()] == [1, 2, 3, 4]
    for part in ("policy/model.safetensors", "critic/model.safetensors", "critic/optim_world_size_1_rank_0.pt"):
        a = (cfg.run_dir / "checkpoints" / "global_step_4" / part).read_bytes()
        b = (cut_cfg.run_dir / "checkpoints" / "global_step_4" / part).read_bytes()
        assert a == b, part
    keys = [k for k in RunReader(cfg.run_dir).metrics()[-1] if k.startswith("critic/")]
    assert RunReader(cfg.run_dir).metrics()[-1]["critic/critic_loss"] == RunReader(cut_cfg.run_dir).metrics()[-1]["critic/critic_loss"], keys
