"""Does one-step async learn as much as sync? The full quickstart both ways, for grpo and gae, same seed.

For each estimator of ``--estimators``: ``sync`` is the quickstart with the generator and the trainer
apart (``trainer.placement.colocate_all=false``: one-step async needs that, so sync gets it too), and
``async`` the same plus ``trainer.async_one_step=true`` and nothing else: the settings a user gets by
turning it on (sequence-level TIS since skyrl-nb's async default, docs/config.md; ``--extra
trainer.algorithm.off_policy_correction.tis_ratio_type=null`` gives SkyRL's uncorrected default). Each is one ``python -m skyrl_engine train`` job on a private local Ray cluster, one
after the other. The rise is the notebook's figure (``reward_change``: mean of the first and last 20
steps). Goal: ``async`` rises at least as much as ``sync`` less 0.03.

    .venv/bin/python bench/async_parity.py --out bench/results/async_parity.json
    .venv/bin/python bench/async_parity.py --estimators gae --extra trainer.algorithm.off_policy_correction.tis_ratio_type=token
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from train_job import private_ray_env, train_job

GOAL = 0.03


def run_arm(estimator: str, mode: str, run_root: str, extra: list[str]) -> dict:
    overrides = ["trainer.num_threads=1", "trainer.placement.colocate_all=false",
                 f"trainer.algorithm.advantage_estimator={estimator}"]
    if mode == "async":
        overrides += ["trainer.async_one_step=true", *extra]
    job = train_job("quickstart", run_root, f"{estimator}-{mode}", overrides, env=private_ray_env())
    return {"estimator": estimator, "mode": mode, "overrides": overrides, **job.learning(),
            "staleness_max": max(r.get("async/staleness_max", 0.0) for r in job.reader.metrics())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--estimators", default="grpo,gae")
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--extra", nargs="*", default=[], help="overrides for the async arm only (experiments)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    run_root = tempfile.mkdtemp(prefix="skyrl-bench-async-parity-")
    runs = []
    for estimator in args.estimators.split(","):
        for mode in args.modes.split(","):
            runs.append(run_arm(estimator, mode, run_root, args.extra))
            print(json.dumps(runs[-1]), flush=True)
    verdict = {}
    for estimator in args.estimators.split(","):
        by_mode = {r["mode"]: r["reward_gain"] for r in runs if r["estimator"] == estimator}
        if {"sync", "async"} <= by_mode.keys():
            gap = round(by_mode["sync"] - by_mode["async"], 4)
            verdict[estimator] = {"sync_gain": by_mode["sync"], "async_gain": by_mode["async"],
                                  "async_short_by": gap, "within_goal": gap <= GOAL}
    result = {"bench": "async_parity", "goal_within": GOAL, "async_extra": args.extra, "verdict": verdict,
              "runs": runs, "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print(json.dumps(verdict))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
