"""One ``python -m skyrl_engine train`` job run to its end for a benchmark (real_model.py, quickstart_spread.py):
its own process on this machine, output in ``<run_root>/<run_id>.log``, timed, its peak resident memory and
the load average around it; a failed job raises with the log's tail."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class TrainJob:
    reader: Any  # skyrl_core.runs.RunReader on the run's store
    wall_s: float
    peak_rss_mb: float  # the job process's ru_maxrss
    load_avg_1m: list[float]  # before, after

    def learning(self) -> dict[str, Any]:
        """What the run learned and took, as the benches report it: its steps, the notebook's rise
        (``reward_change``: first and last 20 steps), the greedy evals, wall time and load."""
        change = self.reader.reward_change()
        return {"steps": len(self.reader.metrics()), "reward_first": round(change.first, 4),
                "reward_last": round(change.last, 4), "reward_gain": round(change.gain, 4), "window": change.window,
                "evals": [round(e["eval/all/avg_score"], 4) for e in self.reader.events() if e.get("kind") == "eval"],
                "wall_s": self.wall_s, "load_avg_1m": self.load_avg_1m}

    def __repr__(self) -> str:
        return (f"TrainJob({self.reader.run_id}: {len(self.reader.metrics())} steps, {self.wall_s} s, "
                f"peak RSS {self.peak_rss_mb} MB, load {self.load_avg_1m})")


def private_ray_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment (plus ``extra``) for a job that starts its own private local Ray, never
    joining a cluster from outside (no ``RAY_ADDRESS``)."""
    env = {**os.environ, **(extra or {})}
    env.pop("RAY_ADDRESS", None)
    return env


def train_job(preset: str, run_root: str, run_id: str, overrides: list[str],
              env: dict[str, str] | None = None) -> TrainJob:
    """Run ``preset`` with ``overrides`` as run ``run_id`` under ``run_root``; ``env``: the job's whole
    environment (None: this process's)."""
    from skyrl_core.runs import RunReader

    cmd = [sys.executable, "-m", "skyrl_engine", "train", "--config", preset, f"run.run_root={run_root}",
           f"run.run_id={run_id}", *overrides]
    log_path = Path(run_root) / f"{run_id}.log"
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - started
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise RuntimeError(f"{run_id}: the job failed (exit {code}):\n{log_path.read_text()[-2000:]}")
    return TrainJob(reader=RunReader(os.path.join(run_root, run_id)), wall_s=round(wall, 1),
                    peak_rss_mb=round(usage.ru_maxrss / 1024, 1),
                    load_avg_1m=[round(load_before, 2), round(os.getloadavg()[0], 2)])
