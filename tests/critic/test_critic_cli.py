"""``python -m skyrl_engine train ... advantage_estimator=gae`` on Ray (slow): critic metrics and
checkpoint, and a kill -9 + resume that ends bit-identical to an uninterrupted run, critic included."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SMALL = [
    "trainer.algorithm.advantage_estimator=gae",
    "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.critic_mini_batch_size=2",
    "trainer.micro_train_batch_size_per_gpu=16", "generator.n_samples_per_prompt=4",
    "generator.sampling_params.max_generate_length=4", "trainer.eval_interval=0", "trainer.eval_before_train=false",
    "trainer.num_threads=1", "trainer.max_training_steps=8", "trainer.ckpt_interval=3",
    "trainer.policy.optimizer_config.lr=1e-3", "trainer.critic.optimizer_config.lr=1e-3",
    "trainer.placement.colocate_all=false",  # generator, trainer and critic as Ray actors
]


def _cli(run_root: Path, run_id: str, model: str, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    args = [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={run_root}",
            f"run.run_id={run_id}", f"trainer.policy.model.path={model}", *SMALL, *extra]
    # own session: kill -9 of the group takes the local Ray processes (the critic actor too) with the driver
    return subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(proc: subprocess.Popen, timeout: float = 600) -> None:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the run did not finish in {timeout}s:\n{out[-4000:]}")
    assert proc.returncode == 0, out[-4000:]


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_gae_on_ray_writes_critic_metrics_and_resumes_exactly_after_kill_9(tmp_path, tiny_model_dir):
    _finish(_cli(tmp_path, "straight", tiny_model_dir))
    straight = tmp_path / "straight"
    rows = _metrics(straight)
    assert [r["step"] for r in rows] == list(range(1, 9))
    for key in ("critic/critic_loss", "critic/values_mean", "critic/values_clipfrac", "critic/grad_norm"):
        assert all(key in r for r in rows), key
    events = [json.loads(line) for line in (straight / "events.jsonl").read_text().splitlines()]
    assert not [e for e in events if "local Ray did not start" in e.get("message", "")], events  # actors, not in-process

    victim = _cli(tmp_path, "killed", tiny_model_dir)
    latest = tmp_path / "killed" / "checkpoints" / "latest_ckpt_global_step.txt"
    deadline = time.time() + 300
    while not (latest.exists() and int(latest.read_text() or 0) >= 3):
        assert victim.poll() is None, victim.communicate()[0][-3000:]
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.2)
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait()
    assert max(r["step"] for r in _metrics(tmp_path / "killed")) < 8

    _finish(_cli(tmp_path, "killed", tiny_model_dir, "trainer.resume_mode=latest"))
    killed = tmp_path / "killed"
    assert [r["step"] for r in _metrics(killed)] == list(range(1, 9))
    for part in ("policy/model.safetensors", "critic/model.safetensors"):
        a = (straight / "checkpoints" / "global_step_8" / part).read_bytes()
        b = (killed / "checkpoints" / "global_step_8" / part).read_bytes()
        assert a == b, part
    assert _metrics(straight)[-1]["critic/critic_loss"] == _metrics(killed)[-1]["critic/critic_loss"]
