"""The engine's trainer loop run through the async pipeline (every role in this process, no Ray)."""

from __future__ import annotations

import pytest

from skyrl_core.config import load_config
from skyrl_core.runs import RunReader, RunWriter
from skyrl_engine.async_pipeline import PipelinedTrainer, staleness_bound
from skyrl_engine.tasks import load_prompts
from skyrl_engine.trainer import RLTrainer
from skyrl_engine.workers import Workers

ASYNC_KEYS = ["timing/wait_for_batch", "timing/wait_for_policy", "async/staleness_mean", "async/staleness_max"]


def _trainer(tmp_path, model_dir, *extra):
    cfg = load_config("quickstart", [
        f"trainer.policy.model.path={model_dir}", f"run.run_root={tmp_path}", "run.run_id=async",
        "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=16",
        "generator.n_samples_per_prompt=4", "trainer.max_training_steps=4", "trainer.eval_interval=4",
        "trainer.eval_batch_size=8", "trainer.eval_before_train=false", "trainer.ckpt_interval=2",
        "trainer.num_threads=1", "generator.sampling_params.max_generate_length=4",
        "trainer.placement.colocate_all=false",  # async schedules need it; the roles still stay in this process
        *extra,
    ])
    assert cfg.problems(check_files=False) == []
    train = load_prompts(cfg.data.train_data, "arithmetic")
    val = load_prompts(cfg.data.val_data, "arithmetic")[:8]
    workers = Workers.create(cfg, model_dir, cfg.total_steps(len(train)), in_process=True)
    assert not workers.generator.remote and not workers.policy.remote
    return cfg, RLTrainer(cfg, RunWriter(cfg.run_dir), workers, train, val)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("overrides", "expected_staleness"),
    [
        (["trainer.async_one_step=true"], [0, 1, 1, 1]),
        (["trainer.fully_async.enabled=true", "trainer.fully_async.max_staleness_steps=2"], None),
        # gae: the critic trains on the trainer's side of the pipeline, on the (stale) batch it gets
        (["trainer.async_one_step=true", "trainer.algorithm.advantage_estimator=gae",
          "trainer.critic_mini_batch_size=4"], [0, 1, 1, 1]),
    ],
)
def test_pipelined_trainer_writes_the_run_store(tmp_path, tiny_policy_dir, overrides, expected_staleness) -> None:
    cfg, trainer = _trainer(tmp_path, tiny_policy_dir, *overrides)
    bound = staleness_bound(cfg)
    pipelined = PipelinedTrainer(trainer, bound)
    last = pipelined.train()
    reader = RunReader(cfg.run_dir)
    rows = reader.metrics()
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for row in rows:
        for key in ASYNC_KEYS + ["reward/avg_raw_reward", "policy/policy_loss", "timing/sync_weights", "timing/step"]:
            assert key in row, key
        assert row["async/staleness_max"] <= bound
    staleness = [r["async/staleness_max"] for r in rows]
    if expected_staleness is not None:
        assert staleness == expected_staleness
    if cfg.trainer.algorithm.advantage_estimator == "gae":
        assert all(r["critic/critic_loss"] > 0 and "critic/values_mean" in r for r in rows)
    assert "eval/all/avg_score" in last
    assert reader.status()["state"] == "succeeded" and reader.status()["step"] == 4
    kinds = [e["kind"] for e in reader.events()]
    assert kinds[0] == "started" and kinds[-1] == "finished" and kinds.count("checkpoint_saved") == 2
    assert reader.trajectory_steps() == [1, 2, 3, 4]
    assert "PipelinedTrainer(mode=" in repr(pipelined)
