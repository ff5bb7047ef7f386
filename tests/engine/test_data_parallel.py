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
    (["trainer.placement.policy_num_gpus_per_node=2", "trainer.algorithm.advantage_estimator=gae",
      "trainer.placement.critic_num_nodes=2"], "trainer.placement.critic_num_nodes × critic_num_gpus_per_node:",
     "2 × 1 is not allowed; the critic's ranks share the policy's bundles, allowed: 1 × 1 or the policy's 1 × 2"),
    (["trainer.placement.policy_num_gpus_per_node=2", "trainer.strategy=ddp",
      "trainer.policy.fsdp_config.mixed_precision.param_dtype=bf16"], "trainer.policy.fsdp_config.mixed_precision:",
     "applies to fsdp2 on several ranks, not to trainer.strategy=ddp"),
    (["trainer.critic.fsdp_config.cpu_offload=true", "trainer.algorithm.advantage_estimator=gae"],
     "trainer.critic.fsdp_config.cpu_offload:", "not to 1 critic rank (trainer.placement.critic_num_nodes"),
    (["trainer.placement.policy_num_gpus_per_node=2", "trainer.policy.fsdp_config.fsdp_size=1"],
     "trainer.policy.fsdp_config.fsdp_size:", "allowed: -1 or 2 (every rank)"),
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


def _batch(vocab: int):
    """8 rows (4 prompts × 2 samples) of random tokens: 6 prompt + 6 response, a few responses shorter."""
    import torch

    from skyrl_engine.policy import TrainBatch

    g = torch.Generator().manual_seed(0)
    sequences = torch.randint(3, vocab, (8, 12), generator=g)
    response_mask = torch.ones(8, 6, dtype=torch.long)
    response_mask[1, 4:] = 0
    response_mask[6, 2:] = 0
    attention = torch.cat([torch.ones(8, 6, dtype=torch.long), response_mask], dim=1)
    return TrainBatch(sequences_BL=sequences, attention_mask_BL=attention, response_mask_BT=response_mask,
                      advantages_BT=torch.randn(8, 6, generator=g) * response_mask,
                      rollout_logprobs_BT=-torch.rand(8, 6, generator=g) * 3, group_size=2)


def _trainer_section():
    return load_config("quickstart", ["trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4",
                                      "generator.n_samples_per_prompt=2", "trainer.micro_train_batch_size_per_gpu=4",
                                      "trainer.ckpt_interval=0", "trainer.strategy=ddp"]).trainer


def _ddp_rank(rank: int, address: str, model_dir: str, results) -> None:
    from skyrl_engine.models import load_tokenizer
    from skyrl_engine.policy import PolicyWorker

    worker = PolicyWorker(model_dir, _trainer_section(), 1.0, 1, num_threads=1, rank=rank, world_size=2)
    joined = worker.join_group(address, "ddp")
    metrics = worker.train_step(_batch(len(load_tokenizer(model_dir))))
    weights = worker.get_weights()
    if rank == 0:  # numpy arrays travel by value (torch tensors by a file descriptor this process closes)
        results.put((joined, metrics, {k: v.numpy() for k, v in weights.items()}))
    worker.dist.close()


@pytest.mark.slow
def test_two_ddp_ranks_train_exactly_as_one_worker(tiny_model_dir) -> None:
    """The ddp strategy on the worker itself (two processes, gloo, no Ray): one update on the same batch
    with the same micro-batches equals one worker's."""
    import multiprocessing

    from skyrl_engine.distributed import rendezvous_address
    from skyrl_engine.models import load_tokenizer
    from skyrl_engine.policy import PolicyWorker

    single = PolicyWorker(tiny_model_dir, _trainer_section(), 1.0, 1, num_threads=1)
    expected = single.train_step(_batch(len(load_tokenizer(tiny_model_dir))))
    expected_weights = single.get_weights()

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    address = rendezvous_address()
    procs = [ctx.Process(target=_ddp_rank, args=(rank, address, tiny_model_dir, results)) for rank in (0, 1)]
    for proc in procs:
        proc.start()
    joined, metrics, weights = results.get(timeout=240)
    for proc in procs:
        proc.join(timeout=60)
        assert proc.exitcode == 0
    assert joined["strategy"] == "ddp" and joined["rank"] == 0
    assert metrics["policy/policy_loss"] == pytest.approx(expected["policy/policy_loss"], rel=1e-5)
    assert metrics["policy/rank_resident_bytes_max"] == expected["policy/rank_resident_bytes_max"]  # replicas
    gap = max(abs(weights[k] - expected_weights[k].numpy()).max() for k in expected_weights)
    assert gap <= 1e-5, gap
