"""Running ``python -m skyrl_engine train`` from tests: start, finish, run to the end, kill -9 after a
checkpoint; and a tiny run trained in the test's own process (``train_in_process``).

Shared by the engine, critic, async and vLLM CLI tests (``tests/`` is on sys.path through its conftest).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def _train_call(run_root: Path, run_id: str, model: str, overrides: tuple[str, ...],
                env: dict[str, str] | None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of ``python -m skyrl_engine train`` on the quickstart preset."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    full_env.pop("RAY_ADDRESS", None)  # each run starts its own local Ray, never a cluster from outside
    args = [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={run_root}",
            f"run.run_id={run_id}", f"trainer.policy.model.path={model}", *overrides]
    return args, full_env


def start_train(run_root: Path, run_id: str, model: str, *overrides: str,
                env: dict[str, str] | None = None) -> subprocess.Popen:
    """The engine CLI on the quickstart preset with ``model`` and ``overrides``, in its own session."""
    args, full_env = _train_call(run_root, run_id, model, overrides, env)
    # own session: kill -9 of the group takes a local Ray cluster's processes with the driver
    return subprocess.Popen(args, env=full_env, start_new_session=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def run_train(run_root: Path, run_id: str, model: str, *overrides: str, env: dict[str, str] | None = None,
              timeout: float = 600) -> subprocess.CompletedProcess:
    """The same command run to its end; stdout and stderr kept apart, whatever the exit code."""
    args, full_env = _train_call(run_root, run_id, model, overrides, env)
    return subprocess.run(args, env=full_env, capture_output=True, text=True, timeout=timeout)


def finish(proc: subprocess.Popen, timeout: float = 600) -> str:
    """Wait for the run; fail the test (with the output's tail) unless it exits 0. Returns the output."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the run did not finish in {timeout}s:\n{out[-4000:]}")
    assert proc.returncode == 0, out[-4000:]
    return out


def kill_after_checkpoint(proc: subprocess.Popen, run_dir: Path, step: int, timeout: float = 300) -> None:
    """kill -9 the run's process group once checkpoint ``step`` (or a later one) is on disk.

    The group is stopped (SIGSTOP) while each check reads the checkpoint marker and runs on for 20 ms between
    checks, so the run gets at most those 20 ms past the checkpoint before the kill: a fast machine cannot finish
    the run in between (on an AMX Xeon a tiny gae run once reached its last step before a 0.2 s poll killed it)."""
    latest = run_dir / "checkpoints" / "latest_ckpt_global_step.txt"
    deadline = time.time() + timeout
    try:
        while True:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            os.killpg(proc.pid, signal.SIGSTOP)
            text = latest.read_text().strip() if latest.exists() else ""
            if text.isdigit() and int(text) >= step:
                break
            os.killpg(proc.pid, signal.SIGCONT)
            assert time.time() < deadline, "no checkpoint appeared"
            time.sleep(0.02)
    finally:
        with contextlib.suppress(ProcessLookupError):  # also when the wait failed: no stopped group is left behind
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def train_in_process(run_root: Path, run_id: str, model: str, steps: int, *overrides: str) -> Path:
    """``steps`` steps of the quickstart preset on ``model``, trained in this process (no Ray, no subprocess; a few
    seconds for the tiny model): 2 prompts a step, 2 samples each, 4 new tokens, no evaluation, a checkpoint after
    every step; ``overrides`` after those. Returns the run's folder."""
    from skyrl_core.config import load_config
    from skyrl_engine.build import build

    cfg = load_config("quickstart", [
        f"trainer.policy.model.path={model}", f"run.run_root={run_root}", f"run.run_id={run_id}",
        "trainer.train_batch_size=2", "trainer.policy_mini_batch_size=2", "trainer.micro_train_batch_size_per_gpu=4",
        "generator.n_samples_per_prompt=2", f"trainer.max_training_steps={steps}", "trainer.eval_interval=0",
        "trainer.eval_before_train=false", "trainer.ckpt_interval=1", "trainer.num_threads=1",
        "generator.sampling_params.max_generate_length=4", *overrides])
    engine = build(cfg, model_path=model, val_rows=[], in_process=True)
    try:
        engine.train()
    finally:
        engine.shutdown()
    return Path(cfg.run_dir)


def distinct_prompts(dataset: str, n: int) -> list[list[dict[str, str]]]:
    """The first ``n`` different chat prompts of a dataset (``builtin://...`` or a file), in order."""
    from skyrl_engine.tasks import load_prompts

    prompts: list[list[dict[str, str]]] = []
    for row in load_prompts([dataset]):
        if row.prompt not in prompts:
            prompts.append(row.prompt)
        if len(prompts) == n:
            break
    return prompts
