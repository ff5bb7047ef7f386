"""Steps/s of the synchronous loop vs one-step off-policy async, same disaggregated config, one run.

Both runs: the quickstart (built-in tiny model, arithmetic, 16 prompts × 8 samples) with
``trainer.placement.colocate_all=false`` — the generator and the trainer are separate Ray actors with
one CPU each (torch 1 thread each) on a private local Ray cluster — for ``--steps`` steps from the same
initial weights. Only the training loop is timed (actors are up and warm before the clock starts).

    .venv/bin/python -m bench async_vs_sync --steps 30 --out bench/results/async_vs_sync.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

STEP_KEYS = (
    "timing/step", "timing/generate", "timing/policy_train", "timing/sync_weights", "timing/wait_for_batch",
    "timing/wait_for_policy", "async/staleness_max", "reward/avg_raw_reward",
)


def run_mode(mode: str, steps: int, run_root: str, overrides: list[str]) -> dict:
    """Train ``steps`` steps in ``mode`` (sync | one_step); return timings and per-step metrics."""
    from skyrl_core.config import load_config
    from skyrl_core.runs import RunReader
    from skyrl_engine.build import build
    from skyrl_engine.models import resolve_model_path
    from skyrl_engine.tasks import load_prompts

    cfg = load_config("quickstart", [
        f"run.run_root={run_root}", f"run.run_id={mode}", f"trainer.max_training_steps={steps}",
        "trainer.placement.colocate_all=false", "trainer.num_threads=1", "trainer.eval_interval=0",
        "trainer.eval_before_train=false", "trainer.ckpt_interval=0",
        f"trainer.async_one_step={'true' if mode == 'one_step' else 'false'}", *overrides,
    ])
    train = load_prompts(cfg.data.train_data, cfg.environment.env_class)
    model_dir = resolve_model_path(cfg.trainer.policy.model.path, train, cfg.trainer.seed)
    # colocate_all=false on the connected Ray cluster: the generator and the policy are actors; async_one_step
    # picks the pipelined trainer
    engine = build(cfg, model_path=model_dir, train_rows=train, val_rows=[], in_process=False)
    workers, loop = engine.workers, engine.trainer
    try:
        t0 = time.perf_counter()
        loop.train()
        wall = time.perf_counter() - t0
    finally:
        workers.shutdown()
    rows = RunReader(cfg.run_dir).metrics()
    per_step = {key: [r.get(key) for r in rows] for key in STEP_KEYS}
    rewards = per_step["reward/avg_raw_reward"]
    k = max(1, min(5, len(rewards) // 3))
    return {
        "mode": mode,
        "steps": len(rows),
        "wall_s": round(wall, 3),
        "steps_per_s": round(len(rows) / wall, 3),
        "reward_first": round(sum(rewards[:k]) / k, 4),
        "reward_last": round(sum(rewards[-k:]) / k, 4),
        "staleness_max": max((s or 0) for s in per_step["async/staleness_max"]),
        "mean": {key: round(sum(v or 0 for v in vals) / len(vals), 4) for key, vals in per_step.items()},
        "per_step": per_step,
    }


def main(argv: list[str] | None = None) -> int:
    """Run sync then one-step async; print (and optionally write) one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", default=None)
    parser.add_argument("overrides", nargs="*", help="extra key=value config overrides for both runs")
    args = parser.parse_args(argv)

    import ray

    from skyrl_engine.ray_runtime import start_private_ray

    run_root = tempfile.mkdtemp(prefix="skyrl-bench-async-")
    temp_dir = start_private_ray(num_cpus=2)
    try:
        result = {"steps": args.steps, "overrides": args.overrides, "load_avg_1m_before": os.getloadavg()[0]}
        for mode in ("sync", "one_step"):
            result[mode] = run_mode(mode, args.steps, run_root, args.overrides)
        result["speedup_steps_per_s"] = round(result["one_step"]["steps_per_s"] / result["sync"]["steps_per_s"], 3)
        result["load_avg_1m_after"] = os.getloadavg()[0]
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(run_root, ignore_errors=True)
    summary = {k: v for k, v in result.items() if k not in ("sync", "one_step")}
    for mode in ("sync", "one_step"):
        summary[mode] = {k: v for k, v in result[mode].items() if k != "per_step"}
    print(json.dumps(summary, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
