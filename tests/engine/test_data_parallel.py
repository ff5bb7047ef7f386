"""A policy on two ranks (issue 12): two Ray actors forming one torch.distributed group (gloo on CPU),
the model sharded by FSDP2, each rank training on its half of every mini-batch.

The 2-rank run and a 1-worker run of the quickstart, same seed, same global batch and the same
``micro_train_batch_size_per_gpu`` (so every micro-batch a rank runs is one the single worker runs too),
must agree step by step; they do to the bit here, the assertion is the issue's tolerance.
"""

from __future__ import annotations

import pytest

from skyrl_core.config import ConfigError, load_config, policy_ranks

STEPS = 10
RUN = ["trainer.ckpt_interval=0", "trainer.eval_interval=0",
       "trainer.eval_before_train=false", f"trainer.max_training_steps={STEPS}", "trainer.num_threads=1",
       "trainer.resume_mode=none", "trainer.micro_train_batch_size_per_gpu=64"]


def test_ranks_come_from_the_placement_keys() -> None:
    cfg = load_config("quickstart", ["trainer.placement.policy_num_nodes=2",
                                     "trainer.placement.policy_num_gpus_per_node=2", "trainer.ckpt_interval=0"])
    assert policy_ranks(cfg) == 4 and cfg.trainer.strategy == "fsdp2"
    assert policy_ranks(load_config("quickstart", ["trainer.placement.policy_num_gpus_per_node=0"])) == 1


@pytest.mark.parametrize(("overrides", "key", "says"), [
    (["trainer.placement.policy_num_gpus_per_node=3", "trainer.ckpt_interval=0"], "trainer.policy_mini_batch_size:",
     "128 rows do not split evenly across 3 policy ranks"),
    (["trainer.placement.policy_num_gpus_per_node=2", "trainer.ckpt_interval=5"], "trainer.ckpt_interval:",
     "sharded checkpoints are not written yet; allowed: 0"),
    (["trainer.strategy=fsdp"], "trainer.strategy:", "allowed: fsdp2, ddp"),
])
def test_what_several_ranks_cannot_do_is_refused_in_one_line(overrides, key, says) -> None:
    with pytest.raises(ConfigError) as err:
        load_config("quickstart", overrides).check()
    (line,) = err.value.problems
    assert line.startswith(key) and says in line and "\n" not in line


@pytest.mark.slow
def test_two_fsdp2_ranks_train_exactly_as_one_worker(engine_ray, tmp_path, private_model_cache) -> None:
    from skyrl_core.runs import RunReader, RunWriter
    from skyrl_engine.async_pipeline import make_trainer
    from skyrl_engine.models import resolve_model_path
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.workers import Workers

    runs = {}
    for ranks in (1, 2):
        # one worker: the quickstart's own placement, every role in this process (no actor to start);
        # two ranks: two policy actors beside a generator actor
        cfg = load_config("quickstart", [*RUN, f"run.run_root={tmp_path}", f"run.run_id=ranks{ranks}",
                                         f"trainer.placement.colocate_all={ranks == 1}",
                                         f"trainer.placement.policy_num_gpus_per_node={ranks}"]).check()
        train = load_prompts(cfg.data.train_data, cfg.environment.env_class)
        model = resolve_model_path(cfg.trainer.policy.model.path, train, cfg.trainer.seed)
        workers = Workers.create(cfg, model, STEPS)
        try:
            if ranks == 2:
                assert [r["rank"] for r in workers.policy.ranks] == [0, 1]
                assert {r["strategy"] for r in workers.policy.ranks} == {"fsdp2"}
                assert "PolicyWorker × 2 (Ray actors, fsdp2)" in repr(workers)
            make_trainer(cfg, RunWriter(cfg.run_dir), workers, train, []).train()
            weights = workers.policy.call("get_weights")
        finally:
            workers.shutdown()
        runs[ranks] = (RunReader(cfg.run_dir).metrics(), weights)

    # the run records each rank, its strategy and its Ray node
    started = [e for e in RunReader(tmp_path / "ranks2").events() if e["kind"] == "started"]
    assert [r["rank"] for r in started[0]["policy_ranks"]] == [0, 1]
    assert all(r["strategy"] == "fsdp2" and r["node_id"] for r in started[0]["policy_ranks"])
    (one, w1), (two, w2) = runs[1], runs[2]
    assert [r["step"] for r in one] == [r["step"] for r in two] == list(range(1, STEPS + 1))
    gaps = [abs(a["policy/policy_loss"] - b["policy/policy_loss"]) / max(abs(a["policy/policy_loss"]), 1e-12)
            for a, b in zip(one, two, strict=True)]
    weight_gap = max((w1[k] - w2[k]).abs().max().item() for k in w1)
    print(f"policy_loss relative gap per step: {gaps}; final weights max |diff|: {weight_gap}")
    assert max(gaps) <= 1e-5 and weight_gap <= 1e-5
    assert [a["reward/avg_raw_reward"] for a in one] == [b["reward/avg_raw_reward"] for b in two]
    # sharding is real: each rank holds at most 0.6x the single worker's parameters + AdamW state
    assert two[-1]["policy/rank_resident_bytes_max"] <= 0.6 * one[-1]["policy/rank_resident_bytes_max"]
