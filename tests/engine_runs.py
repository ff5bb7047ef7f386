"""Running ``python -m skyrl_engine train`` from tests: start, finish, kill -9 after a checkpoint.

Shared by tests/engine/test_cli.py and tests/critic/test_critic_cli.py (``tests/`` is on sys.path
through its conftest).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


def start_train(run_root: Path, run_id: str, model: str, *overrides: str) -> subprocess.Popen:
    """The engine CLI on the quickstart preset with ``model`` and ``overrides``, in its own session."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("RAY_ADDRESS", None)
    args = [sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart", f"run.run_root={run_root}",
            f"run.run_id={run_id}", f"trainer.policy.model.path={model}", *overrides]
    # own session: kill -9 of the group takes a local Ray cluster's processes with the driver
    return subprocess.Popen(args, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


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
    """kill -9 the run's process group once checkpoint ``step`` (or a later one) is on disk."""
    latest = run_dir / "checkpoints" / "latest_ckpt_global_step.txt"
    deadline = time.time() + timeout
    while not (latest.exists() and int(latest.read_text() or 0) >= step):
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.time() < deadline, "no checkpoint appeared"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
