"""The ``smollm2`` preset (SmolLM2-135M-Instruct on word problems), full fine-tuning and LoRA side by side.

Each arm is one ``python -m skyrl_engine train --config smollm2`` job on this machine (colocated on the
CPU, every role in the job's process), same seed and data, for ``--steps`` steps:

- ``lora``: the preset as it is (LoRA rank 8, alpha 16, lr 2e-4);
- ``full``: ``trainer.policy.model.lora.rank=0`` and ``--full-lr`` (default 1e-5).

The arms run one after the other, ``--repeats`` times alternating, so the machine's load falls on both.
Reported per arm: reward mean over the first 10 and the last 10 steps and their difference, the greedy eval
score before training and at the end, seconds per step (and its generate / train / sync parts), trained
tokens per second, bytes per weight sync, the job's peak resident memory (its ``ru_maxrss``), and the load
average around it.

    .venv/bin/python -m bench real_model --steps 60 --out bench/results/real_model.json
    .venv/bin/python -m bench real_model --arms lora --steps 45 --minutes 20 --out bench/results/real_model_20min.json

The second is issue 38's check: the preset as users run it (LoRA), as many steps as fit in 20 minutes of the job's
wall time (start, the eval before training and at the end included).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.train_job import train_job

WINDOW = 10
ARMS = {
    "lora": [],
    "full": ["trainer.policy.model.lora.rank=0"],
}


def _mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 4) if values else None


def run_arm(arm: str, steps: int, run_root: str, overrides: list[str], full_lr: float) -> dict:
    """Train one arm in its own process; its figures from the run store."""
    extra = [*ARMS[arm], f"trainer.policy.optimizer_config.lr={full_lr}"] if arm == "full" else []
    job = train_job("smollm2", run_root, f"{arm}-{int(time.time())}",
                    [f"trainer.max_training_steps={steps}", "trainer.ckpt_interval=0", f"trainer.eval_interval={steps}",
                     *extra, *overrides])
    reader = job.reader
    rows = reader.metrics()
    if len(rows) < steps:
        raise RuntimeError(f"{arm}: the job ended after {len(rows)} of {steps} steps")
    col = {key: [r.get(key) for r in rows] for key in rows[-1]}
    rewards = col["reward/avg_raw_reward"]
    evals = {int(e["step"]): e["eval/all/avg_score"] for e in reader.events() if e.get("kind") == "eval"}
    first, last = _mean(rewards[:WINDOW]), _mean(rewards[-WINDOW:])
    started_event = next(e for e in reader.events() if e.get("kind") == "started")
    return {
        "arm": arm, "overrides": [*extra, *overrides], "steps": len(rows), "wall_s": job.wall_s,
        "reward_first10": first, "reward_last10": last, "reward_gain": round(last - first, 4),
        "eval_before": evals.get(0), "eval_end": evals.get(steps),
        "step_s": _mean(col["timing/step"]), "generate_s": _mean(col["timing/generate"]),
        "policy_train_s": _mean(col["timing/policy_train"]), "sync_weights_s": _mean(col["timing/sync_weights"]),
        "sync_weights_bytes": _mean(col.get("policy/sync_weights_bytes", [])),
        "train_tokens_per_s": _mean(col["trainer/tokens_per_second"]),
        "generated_tokens_per_step": _mean(col["generate/avg_num_tokens"]),
        "peak_rss_mb": job.peak_rss_mb,
        "parameters": started_event.get("policy_parameters"),
        "load_avg_1m": job.load_avg_1m,
        "rewards": [round(r, 4) for r in rewards],
    }


def _meets(run: dict, minutes: float | None) -> bool:
    if run["reward_gain"] < 0.15:
        return False
    if minutes is None:
        return True
    gained = run["eval_before"] is not None and run["eval_end"] is not None and run["eval_end"] > run["eval_before"]
    return gained and run["wall_s"] <= minutes * 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=1, help="runs of each arm, alternating")
    parser.add_argument("--arms", default="lora,full")
    parser.add_argument("--full-lr", type=float, default=1e-5)
    parser.add_argument("--minutes", type=float, default=None,
                        help="a wall-time budget per arm (issue 38: 20): the goal then also needs the job's wall time "
                             "within it and a greedy-eval gain")
    parser.add_argument("--out", default=None)
    parser.add_argument("overrides", nargs="*", help="extra key=value overrides for every arm")
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    run_root = tempfile.mkdtemp(prefix="skyrl-bench-real-")
    runs: list[dict] = []
    result: dict = {}
    for _ in range(args.repeats):
        for arm in arms:
            runs.append(run_arm(arm, args.steps, run_root, args.overrides, args.full_lr))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "rewards"}), flush=True)
            # written after every arm: an hour-long bench that is stopped keeps the arms it finished
            result = {"bench": "real_model", "model": "builtin://smollm2-135m-instruct", "preset": "smollm2",
                      "steps": args.steps, "window": WINDOW, "cpus": os.cpu_count(), "runs": runs,
                      "goal": "reward_last10 - reward_first10 >= 0.15 with either arm"
                              + (f", eval_end > eval_before, wall_s <= {args.minutes * 60:.0f}" if args.minutes else ""),
                      "goal_met": {a: any(_meets(r, args.minutes) for r in runs if r["arm"] == a)
                                   for a in dict.fromkeys(r["arm"] for r in runs)},
                      "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
            if args.out:
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["goal_met"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
