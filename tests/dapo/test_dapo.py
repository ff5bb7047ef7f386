"""DAPO's sampling step: overlong filtering, soft penalty, dynamic sampling (filter and replace).

A fake generator hands out rollouts with chosen rewards, so every branch of ``DynamicSampler`` is checked
exactly; one test runs a real in-process training step through the trainer and reads the Parquet part back.
"""

from __future__ import annotations

import pytest
import torch

from skyrl_core.config import load_config
from skyrl_core.runs import RunReader
from skyrl_engine.build import build
from skyrl_engine.dapo import (
    DynamicSampler,
    concat,
    select,
    soft_overlong_penalty,
    zero_variance_groups,
)
from skyrl_engine.sampler import SamplingParams
from skyrl_engine.tasks import load_prompts
from skyrl_engine.trainer import build_train_batch, trajectory_rows
from skyrl_engine.types import GeneratorOutput, PromptRow, SampleBatch


def _rows(k: int) -> list[PromptRow]:
    return [PromptRow([{"role": "user", "content": f"q{i}"}], "arithmetic", "arith", str(i)) for i in range(k)]


class FakeGenerator:
    """Each generate() call returns the next reward table: one list of n rewards per prompt."""

    def __init__(self, tables, lengths=None, finish=None):
        self.tables = list(tables)
        self.calls = []
        self.lengths = lengths
        self.finish = finish

    def generate(self, rows, n, params, seed):
        self.calls.append((len(rows), seed))
        rewards = [float(r) for group in self.tables.pop(0) for r in group]
        B, T = len(rewards), params.max_generate_length
        lengths = self.lengths or [1] * B
        finish = self.finish or ["stop"] * B
        mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).long()
        samples = SampleBatch(
            prompt_ids_BP=torch.full((B, 2 + len(self.calls)), 7), prompt_mask_BP=torch.ones(B, 2 + len(self.calls), dtype=torch.long),
            response_ids_BT=torch.full((B, T), 9) * mask, response_mask_BT=mask, logprobs_BT=-0.5 * mask.float(),
            finish_reasons=finish,
        )
        return GeneratorOutput(
            samples=samples, rewards_B=rewards, responses=[f"r{b}" for b in range(B)],
            prompts=[rows[b // n].prompt[0]["content"] for b in range(B)], group_ids_B=[b // n for b in range(B)],
            env_classes=["arithmetic"] * B, data_sources=["arith"] * B, env_metrics=[{}] * B, group_size=n,
        )



def _cfg(*extra):
    return load_config("dapo", ["trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4",
                                "generator.n_samples_per_prompt=2", "trainer.micro_train_batch_size_per_gpu=8", *extra])


PARAMS = SamplingParams(max_generate_length=4)


def _sampler(cfg, train_rows) -> DynamicSampler:
    sampler = DynamicSampler.from_config(cfg, train_rows)
    assert isinstance(sampler, DynamicSampler)
    return sampler


def test_soft_penalty_matches_skyrl_formula():
    assert soft_overlong_penalty([1.0] * 5, [1, 2, 3, 4, 5], max_len=4, buffer_len=2, penalty_factor=1.0) == [1.0, 1.0, 0.5, 0.0, 0.0]
    assert soft_overlong_penalty([1.0], [4], 4, 0, 1.0) == [1.0]
    assert zero_variance_groups([1, 1, 0, 1, 0, 0], [0, 0, 1, 1, 2, 2]) == [0, 2]


def test_filter_resamples_until_the_batch_is_full_and_records_drops():
    fake = FakeGenerator([
        [[1, 1], [0, 1], [0, 0], [1, 0]],      # 2 kept, 2 flat
        [[1, 1], [1, 1], [0, 0], [0, 0]],      # 0 kept
        [[0, 1], [1, 0], [1, 0], [1, 1]],      # 3 kept -> 5, one surplus
    ])
    cfg = _cfg("trainer.algorithm.overlong_buffer.len=0", "generator.apply_overlong_filtering=false")
    out = _sampler(cfg, _rows(32)).sample(fake.generate, _rows(4), 2, PARAMS, seed=11)
    assert len(fake.calls) == 3 and len({s for _, s in fake.calls}) == 3
    assert len(set(out.group_ids_B)) == 4 and len(out.rewards_B) == 8
    assert zero_variance_groups(out.rewards_B, out.group_ids_B) == []
    m = out.metrics
    assert m["dynamic_sampling/sample_batches"] == 3 and m["dynamic_sampling/groups_filtered"] == 7
    assert m["dynamic_sampling/groups_kept"] == 4 and m["dynamic_sampling/exhausted"] == 0
    assert m["reward/avg_raw_reward"] == pytest.approx(13 / 24)
    reasons = [c["discarded_reason"] for c in out.discarded.sample_columns]
    assert reasons.count("zero_variance") == 14 and reasons.count("surplus") == 2
    # group ids stay unique across sample batches; stored rows keep one schema
    assert not set(out.group_ids_B) & set(out.discarded.group_ids_B)
    batch, adv = build_train_batch(out, cfg.trainer.algorithm)
    rows = trajectory_rows(3, out, adv, store_token_data=True)
    assert len(rows) == 24 and sum(r["discarded_reason"] is None for r in rows) == 8
    assert len({tuple(sorted(r)) for r in rows}) == 1


def test_filter_gives_up_after_max_sample_batches():
    fake = FakeGenerator([[[1, 1], [0, 0], [1, 0], [1, 1]]] * 2)
    sampler = _sampler(_cfg("trainer.algorithm.dynamic_sampling.max_sample_batches=2"), _rows(32))
    out = sampler.sample(fake.generate, _rows(4), 2, PARAMS, seed=1)
    assert out.metrics["dynamic_sampling/exhausted"] == 1 and out.metrics["dynamic_sampling/groups_kept"] == 2


def test_replace_copies_varying_groups_over_flat_ones():
    fake = FakeGenerator([[[1, 1], [0, 1], [0, 0], [1, 0]]])
    sampler = _sampler(_cfg("trainer.algorithm.dynamic_sampling.type=replace", "trainer.algorithm.overlong_buffer.len=0"),
                       _rows(8))
    out = sampler.sample(fake.generate, _rows(4), 2, PARAMS, seed=5)
    assert len(fake.calls) == 1 and len(out.rewards_B) == 8
    assert sorted(set(out.group_ids_B)) == [1, 3]  # copies keep their source's id (one bigger group, as SkyRL)
    assert out.metrics["dynamic_sampling/groups_replaced"] == 2
    assert [c["discarded_reason"] for c in out.discarded.sample_columns] == ["zero_variance_replaced"] * 4


def test_replace_resamples_when_too_few_groups_vary():
    fake = FakeGenerator([[[1, 1], [0, 0], [0, 0], [1, 0]], [[1, 0], [0, 1], [0, 0], [1, 0]]])
    sampler = _sampler(_cfg("trainer.algorithm.dynamic_sampling.type=replace",
                            "trainer.algorithm.dynamic_sampling.min_replace_ratio=0.5"), _rows(8))
    out = sampler.sample(fake.generate, _rows(4), 2, PARAMS, seed=5)
    assert len(fake.calls) == 2 and out.metrics["dynamic_sampling/groups_replaced"] == 1


def test_overlong_filtering_masks_truncated_samples_and_penalty_lowers_rewards():
    fake = FakeGenerator([[[1, 1], [1, 0], [1, 1], [0, 1]]], lengths=[1, 4, 2, 3, 4, 4, 1, 1],
                       finish=["stop", "length", "stop", "stop", "length", "stop", "stop", "stop"])
    cfg = _cfg("trainer.algorithm.dynamic_sampling.type=null", "trainer.algorithm.overlong_buffer.len=2")
    out = _sampler(cfg, _rows(8)).sample(fake.generate, _rows(4), 2, PARAMS, seed=0)
    assert out.rewards_B == [1.0, 0.0, 1.0, -0.5, 0.0, 0.0, 0.0, 1.0]
    assert out.loss_mask_BT.sum(-1).tolist() == [1, 0, 2, 3, 0, 4, 1, 1]
    assert [c.get("discarded_reason") for c in out.sample_columns] == [
        None, "overlong_filtered", None, None, "overlong_filtered", None, None, None]
    batch, _ = build_train_batch(out, cfg.trainer.algorithm)
    assert torch.equal(batch.response_mask_BT, out.loss_mask_BT)
    assert batch.attention_mask_BL[:, -4:].sum() == out.samples.response_mask_BT.sum()


def test_select_and_concat_repad():
    fake = FakeGenerator([[[1, 0]], [[0, 1], [1, 1]]])
    a = fake.generate(_rows(1), 2, PARAMS, 0)
    b = fake.generate(_rows(2), 2, SamplingParams(max_generate_length=6), 0)
    both = concat([a, select(b, [3, 0])])
    assert both.samples.prompt_ids_BP.shape == (4, 4) and both.samples.response_ids_BT.shape == (4, 6)
    assert both.samples.prompt_mask_BP[:2, 0].tolist() == [0, 0] and both.rewards_B == [1.0, 0.0, 1.0, 0.0]


def test_dynamic_sampler_only_when_configured():
    assert DynamicSampler.from_config(load_config("quickstart"), []) is None
    assert isinstance(DynamicSampler.from_config(_cfg(), []), DynamicSampler)
    assert "DynamicSampler(dynamic_sampling='filter'" in repr(DynamicSampler.from_config(_cfg(), []))
    # each DAPO feature alone switches it on
    for extra in ("trainer.algorithm.dynamic_sampling.type=filter", "generator.apply_overlong_filtering=true",
                  "trainer.algorithm.overlong_buffer.len=2"):
        assert isinstance(DynamicSampler.from_config(load_config("quickstart", [extra]), []), DynamicSampler), extra
    # built from the config's sections directly, the same sampler
    a = _cfg().trainer.algorithm
    direct = DynamicSampler(a.dynamic_sampling, a.overlong_buffer, _cfg().generator.apply_overlong_filtering, [])
    assert repr(direct) == repr(DynamicSampler.from_config(_cfg(), []))


def test_dapo_step_through_the_trainer_writes_drops_to_the_run_store(tmp_path, tiny_model_dir):
    cfg = _cfg(f"trainer.policy.model.path={tiny_model_dir}", f"run.run_root={tmp_path}", "run.run_id=dapo",
               "trainer.max_training_steps=1", "trainer.eval_interval=0", "trainer.ckpt_interval=0",
               "trainer.num_threads=1", "generator.n_samples_per_prompt=4", "trainer.micro_train_batch_size_per_gpu=16",
               "generator.sampling_params.max_generate_length=4")
    engine = build(cfg, model_path=tiny_model_dir, train_rows=load_prompts(cfg.data.train_data, "arithmetic")[:64],
                   val_rows=[], total_steps=1, in_process=True)
    trainer, workers = engine.trainer, engine.workers
    assert isinstance(trainer.dapo, DynamicSampler) and trainer.workers is workers
    metrics = trainer.train_one_step(1)
    for key in ("dynamic_sampling/groups_filtered", "dynamic_sampling/sample_batches", "generate/overlong_filtered",
                "reward/avg_raw_reward", "policy/policy_loss"):
        assert key in metrics, key
    trainer.writer.flush()  # the step's part is written while the next step runs; train() flushes at its end
    frame = RunReader(cfg.run_dir).trajectories(1)
    assert "discarded_reason" in frame.columns
    kept = frame[frame["discarded_reason"].isna() | (frame["discarded_reason"] == "overlong_filtered")]
    assert len(kept) % 4 == 0 and len(kept) <= 16
    dropped = frame[frame["discarded_reason"].isin(["zero_variance", "surplus"])]
    assert len(dropped) == 4 * metrics["dynamic_sampling/groups_filtered"] + (len(frame) - len(kept) - len(dropped))
