"""``python -m skyrl_engine train ... advantage_estimator=gae`` (slow): critic metrics and checkpoint,
and a kill -9 + resume that ends bit-identical to an uninterrupted run, critic included. Colocated on
CPU, so all in the job's process; the critic as a Ray actor runs in
tests/async/test_cli_placements.py::test_disaggregated_one_step_async_with_a_critic_through_the_cli.

This is the engine's kill -9 test: gae's checkpoint is the policy's (weights, optimizer, scheduler,
RNG, data position) plus the critic's, so one run covers both."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from engine_runs import finish, kill_after_checkpoint, start_train

SMALL = [
    "trainer.algorithm.advantage_estimator=gae",
    "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.critic_mini_batch_size=2",
    "trainer.micro_train_batch_size_per_gpu=16", "generator.n_samples_per_prompt=4",
    "generator.sampling_params.max_generate_length=4", "trainer.eval_interval=0", "trainer.eval_before_train=false",
    "trainer.num_threads=1", "trainer.max_training_steps=8", "trainer.ckpt_interval=3",
    "trainer.policy.optimizer_config.lr=1e-3", "trainer.critic.optimizer_config.lr=1e-3",
]


def _cli(run_root: Path, run_id: str, model: str, *extra: str):
    return start_train(run_root, run_id, model, *SMALL, *extra)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_gae_writes_critic_metrics_and_resumes_exactly_after_kill_9(tmp_path, tiny_model_dir):
    # the uninterrupted run and the one to kill share nothing: they run side by side (one thread each)
    straight_proc = _cli(tmp_path, "straight", tiny_model_dir)
    try:
        kill_after_checkpoint(_cli(tmp_path, "killed", tiny_model_dir), tmp_path / "killed", 3)
    except BaseException:
        os.killpg(straight_proc.pid, signal.SIGKILL)
        raise
    finish(straight_proc)
    straight = tmp_path / "straight"
    rows = _metrics(straight)
    assert [r["step"] for r in rows] == list(range(1, 9))
    for key in ("critic/critic_loss", "critic/values_mean", "critic/values_clipfrac", "critic/grad_norm"):
        assert all(key in r for r in rows), key

    assert max(r["step"] for r in _metrics(tmp_path / "killed")) < 8

    finish(_cli(tmp_path, "killed", tiny_model_dir, "trainer.resume_mode=latest"))
    killed = tmp_path / "killed"
    assert [r["step"] for r in _metrics(killed)] == list(range(1, 9))  # each step exactly once
    events = [json.loads(line)["kind"] for line in (killed / "events.jsonl").read_text().splitlines()]
    assert "resumed" in events
    for part in ("policy/model.safetensors", "critic/model.safetensors"):
        a = (straight / "checkpoints" / "global_step_8" / part).read_bytes()
        b = (killed / "checkpoints" / "global_step_8" / part).read_bytes()
        assert a == b, part
    assert _metrics(straight)[-1]["critic/critic_loss"] == _metrics(killed)[-1]["critic/critic_loss"]
