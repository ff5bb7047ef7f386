"""A policy and a critic on two ranks (issue 12): Ray actors forming one torch.distributed group per role
(gloo on CPU), the models sharded by FSDP2, each rank training on its half of every mini-batch.

The 2-rank run and a 1-worker run of the quickstart, same seed, same global batch and the same
``micro_train_batch_size_per_gpu`` (so every micro-batch a rank runs is one the single worker runs too),
must agree step by step; the assertion is the issue's tolerance. Checkpoints written by either resume
on the other.
"""

from __future__ import annotations

import time

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


def _checkpoint_weights(ckpt_dir, role: str) -> dict:
    from safetensors.torch import load_file

    return load_file(str(ckpt_dir / role / "model.safetensors"))


def _max_gap(a: dict, b: dict) -> float:
    keys = set(a) & set(b)
    assert keys and set(a) - keys <= {"lm_head.weight"} and set(b) - keys <= {"lm_head.weight"}
    return max((a[k] - b[k]).abs().max().item() for k in keys)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_gae_on_two_ranks_on_two_nodes_trains_as_one_worker_and_resumes_across_world_sizes(
        engine_ray, tmp_path, private_model_cache) -> None:
    """The quickstart with gae: one worker (every role in this process) against a policy and a critic on
    two FSDP2 ranks each, the ranks on two Ray nodes of this machine (a second ``ray start --address``
    node joined to the session's cluster). Then each run's step-5 checkpoint resumes on the other world
    size (1 → 2 and 2 → 1): the loaded weights are the checkpoint's, and step 6 equals the original's."""
    from ray_clusters import SECOND_NODE_RESOURCE, second_ray_node

    from skyrl_core.runs import RunReader, RunWriter
    from skyrl_engine.build import make_trainer
    from skyrl_engine.models import resolve_model_path
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.workers import Workers

    def config(ranks: int, run_id: str, *extra: str):
        nodes = [] if ranks == 1 else ["trainer.placement.colocate_all=false", "trainer.placement.policy_num_nodes=2",
                                       "trainer.placement.critic_num_nodes=2"]
        return load_config("quickstart", [*RUN, *nodes, "trainer.algorithm.advantage_estimator=gae",
                                          "trainer.ckpt_interval=5", f"run.run_root={tmp_path}",
                                          f"run.run_id={run_id}", *extra]).check()

    cfg = config(1, "ranks1")
    train = load_prompts(cfg.data.train_data, cfg.environment.env_class)
    model = resolve_model_path(cfg.trainer.policy.model.path, train, cfg.trainer.seed)
    runs, workers = {}, {}
    cpus = engine_ray.cluster_resources()["CPU"]
    with second_ray_node(2) as second_node:
        try:
            for ranks in (1, 2):
                cfg = config(ranks, f"ranks{ranks}")
                workers[ranks] = Workers.create(cfg, model, STEPS)
                make_trainer(cfg, RunWriter(cfg.run_dir), workers[ranks], train, []).train()
                runs[ranks] = (RunReader(cfg.run_dir).metrics(), workers[ranks].policy.call("get_weights"),
                               workers[ranks].critic.call("full_state_dict"))
            assert "PolicyWorker × 2 (Ray actors, fsdp2)" in repr(workers[2])
            assert "CriticWorker × 2 (Ray actors, fsdp2)" in repr(workers[2])

            # resume each run's step-5 checkpoint on the other world size, for one more step
            resumed = {}
            for src, dst in ((1, 2), (2, 1)):
                ckpt = tmp_path / f"ranks{src}" / "checkpoints" / "global_step_5"
                assert (ckpt / "policy" / "fsdp_config.json").exists()
                assert len(list((ckpt / "critic").glob(f"optim_world_size_{src}_rank_*.pt"))) == src
                workers[dst].load_checkpoint(str(ckpt))
                assert _max_gap(workers[dst].policy.call("get_weights"), _checkpoint_weights(ckpt, "policy")) == 0
                assert _max_gap(workers[dst].critic.call("full_state_dict"), _checkpoint_weights(ckpt, "critic")) == 0
                cfg = config(dst, f"from{src}to{dst}", "trainer.resume_mode=from_path", f"trainer.resume_path={ckpt}",
                             "trainer.max_training_steps=6")
                make_trainer(cfg, RunWriter(cfg.run_dir), workers[dst], train, []).train()
                resumed[src] = RunReader(cfg.run_dir).metrics()
        finally:
            for w in workers.values():
                w.shutdown()

    # the session's cluster is as it was: the second node is gone, its CPUs with it
    deadline = time.monotonic() + 30
    while SECOND_NODE_RESOURCE in engine_ray.cluster_resources() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert SECOND_NODE_RESOURCE not in engine_ray.cluster_resources()
    assert engine_ray.cluster_resources()["CPU"] == cpus
    # the run records each rank, its strategy and its Ray node: one rank on each node
    (started,) = [e for e in RunReader(tmp_path / "ranks2").events() if e["kind"] == "started"]
    for role in ("policy_ranks", "critic_ranks"):
        assert [r["rank"] for r in started[role]] == [0, 1] and {r["strategy"] for r in started[role]} == {"fsdp2"}
        nodes = [r["node_id"] for r in started[role]]
        assert len(set(nodes)) == 2 and second_node in nodes, (role, nodes)
    (one, p1, c1), (two, p2, c2) = runs[1], runs[2]
    assert [r["step"] for r in one] == [r["step"] for r in two] == list(range(1, STEPS + 1))
    for key in ("policy/policy_loss", "critic/critic_loss"):
        gaps = [abs(a[key] - b[key]) / max(abs(a[key]), 1e-12) for a, b in zip(one, two, strict=True)]
        print(f"{key} relative gap per step: {gaps}")
        assert max(gaps) <= 1e-5, key
    weight_gaps = {"policy": _max_gap(p1, p2), "critic": _max_gap(c1, c2)}
    print(f"final weights max |diff|: {weight_gaps}")
    assert max(weight_gaps.values()) <= 1e-5
    assert [a["reward/avg_raw_reward"] for a in one] == [b["reward/avg_raw_reward"] for b in two]
    # sharding is real: each rank holds at most 0.6x the single worker's parameters + AdamW state
    for role in ("policy", "critic"):
        key = f"{role}/rank_resident_bytes_max"
        assert two[-1][key] <= 0.6 * one[-1][key], (key, two[-1][key], one[-1][key])
    # resumed on the other world size, step 6 is the step the original run made
    for src, rows in resumed.items():
        assert [r["step"] for r in rows] == [5, 6], rows  # step 5's line restored from the checkpoint
        original = runs[src][0][5]
        for key in ("policy/policy_loss", "critic/critic_loss"):
            assert rows[-1][key] == pytest.approx(original[key], rel=1e-5), (src, key)


def _batch(vocab: int):
    """8 rows (4 prompts × 2 samples) of random tokens: 6 prompt + 6 response, a few responses shorter."""
    import torch

    from skyrl_engine.types import TrainBatch

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
    worker.leave_group()


def test_the_rendezvous_port_is_outside_the_ephemeral_range_and_free() -> None:
    """Rank 0's port comes from RENDEZVOUS_PORTS, where outgoing connections (ephemeral ports) do not land; a
    port taken there is skipped."""
    import socket

    from skyrl_engine.distributed import RENDEZVOUS_PORTS, free_port, rendezvous_address

    low, high = RENDEZVOUS_PORTS
    port = free_port("127.0.0.1")
    assert low <= port <= high
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", port))
        held.listen()
        assert all(free_port("127.0.0.1") != port for _ in range(20))
    assert low <= int(rendezvous_address().rsplit(":", 1)[1]) <= high


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


def test_fsdp_config_shapes_the_wrap_and_ddp_is_the_fallback(tiny_model_dir) -> None:
    """On a one-rank gloo group in this process: ``mixed_precision`` computes in bf16 over fp32 master
    weights; a model ``fully_shard`` refuses is wrapped in DDP and the rank says why."""
    import torch

    from skyrl_engine.distributed import rendezvous_address
    from skyrl_engine.models import load_tokenizer
    from skyrl_engine.policy import PolicyWorker

    cfg = load_config("quickstart", ["trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4",
                                     "generator.n_samples_per_prompt=2", "trainer.micro_train_batch_size_per_gpu=4"])
    batch = _batch(len(load_tokenizer(tiny_model_dir)))
    plain = PolicyWorker(tiny_model_dir, cfg.trainer, 1.0, 1, num_threads=1).train_step(batch)
    entropy = "policy/policy_entropy"  # depends on the logits' precision (the first step's loss does not)
    mixed = cfg.trainer.model_copy(deep=True)
    mixed.policy.fsdp_config = type(mixed.policy.fsdp_config)(mixed_precision={"param_dtype": "bf16"})
    worker = PolicyWorker(tiny_model_dir, mixed, 1.0, 1, num_threads=1, rank=0, world_size=1)
    record = worker.join_group(rendezvous_address(), "fsdp2")
    try:
        assert record["strategy"] == "fsdp2" and "fallback" not in record
        metrics = worker.train_step(batch)
        assert metrics[entropy] != plain[entropy] and metrics[entropy] == pytest.approx(plain[entropy], rel=0.01)
        assert {p.dtype for p in worker.model.parameters()} == {torch.float32}  # fp32 master weights
        assert "rank 0 of 1, fsdp2" in repr(worker)
    finally:
        worker.leave_group()

    # the fallback in a process of its own: a DDP reducer freed after its group is destroyed can hang
    # in gloo's destructor, which must not be this test process's problem
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_fallback_rank, args=(tiny_model_dir, rendezvous_address(), results))
    proc.start()
    try:
        deadline = time.monotonic() + 240
        while results.empty():  # its answer, or why it has none: the rank's process died or never finished
            assert proc.is_alive() or not results.empty(), f"the fallback rank's process exited {proc.exitcode}"
            assert time.monotonic() < deadline, "the fallback rank gave no answer in 240 s"
            time.sleep(0.2)
        outcome = results.get(timeout=10)
    finally:
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
    assert not isinstance(outcome, str), outcome  # the rank's traceback
    record, fallback_entropy = outcome
    assert record["strategy"] == "ddp" and record["wrapped"] == "DistributedDataParallel"
    assert record["fallback"] == ("fsdp2 could not wrap the model (NotImplementedError: no FSDP2 on this backend); "
                                  "ddp ran instead")
    assert fallback_entropy == pytest.approx(plain[entropy], rel=1e-6)


def _fallback_rank(model_dir: str, address: str, results) -> None:
    import torch.distributed.fsdp as fsdp

    from skyrl_engine.models import load_tokenizer
    from skyrl_engine.policy import PolicyWorker

    def refuse(*args, **kwargs):
        raise NotImplementedError("no FSDP2 on this backend")

    fsdp.fully_shard = refuse
    try:
        trainer = load_config("quickstart", ["trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4",
                                             "generator.n_samples_per_prompt=2",
                                             "trainer.micro_train_batch_size_per_gpu=4"]).trainer
        worker = PolicyWorker(model_dir, trainer, 1.0, 1, num_threads=1, rank=0, world_size=1)
        record = worker.join_group(address, "fsdp2")
        entropy = worker.train_step(_batch(len(load_tokenizer(model_dir))))["policy/policy_entropy"]
        results.put(({**record, "wrapped": type(worker.model).__name__}, entropy))
    except BaseException:
        import traceback

        results.put(traceback.format_exc())


def test_the_gradient_norm_reads_large_gradients_in_chunks_and_small_ones_as_before() -> None:
    """``clip_grad_norm`` turns a gradient to float64 :data:`NORM_CHUNK` elements at a time: a gradient over several
    chunks gives the float64 norm of the whole to rounding, and is clipped by it; one within a chunk (every tiny-model
    gradient) gives exactly the unchunked sum's bits."""
    from types import SimpleNamespace

    import torch

    from skyrl_engine.trainable import NORM_CHUNK, TrainableWorker

    g = torch.Generator().manual_seed(0)
    big = torch.nn.Parameter(torch.zeros(3 * NORM_CHUNK + 5))
    small = torch.nn.Parameter(torch.zeros(40, 30))
    big.grad, small.grad = torch.randn(big.shape, generator=g), torch.randn(small.shape, generator=g)
    grads = [big.grad.clone(), small.grad.clone()]
    whole = float(sum(x.double().pow(2).sum() for x in grads).sqrt())
    worker = SimpleNamespace(model=torch.nn.ParameterList([big, small]), dist=None)
    norm = TrainableWorker.clip_grad_norm(worker, 1.0)
    assert norm == pytest.approx(whole, rel=1e-12) and norm > 1000
    factor = 1.0 / (norm + 1e-6)
    assert torch.equal(big.grad, grads[0] * factor) and torch.equal(small.grad, grads[1] * factor)

    alone = SimpleNamespace(model=torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(40, 30))]), dist=None)
    alone.model[0].grad = grads[1].clone()
    assert TrainableWorker.clip_grad_norm(alone, 1e9) == float(grads[1].double().pow(2).sum().sqrt())
