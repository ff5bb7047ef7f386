"""Does one-step async learn as much as sync? The full quickstart both ways, for grpo and gae, same seed.

For each estimator of ``--estimators``: ``sync`` is the quickstart with the generator and the trainer
apart (``trainer.placement.colocate_all=false``: one-step async needs that, so sync gets it too), and
``async`` the same plus ``trainer.async_one_step=true`` and nothing else: the settings a user gets by
turning it on (token-level TIS, skyrl-nb's async default since 2026-12-03, sequence-level before, docs/config.md;
``--extra trainer.algorithm.off_policy_correction.tis_ratio_type=null`` gives SkyRL's uncorrected default). Each is one ``python -m skyrl_engine train`` job on a private local Ray cluster, one
after the other. The rise is the notebook's figure (``reward_change``: mean of the first and last 20
steps). Goal: ``async`` rises at least as much as ``sync`` less 0.03.

    .venv/bin/python -m bench async_parity --out bench/results/async_parity.json
    .venv/bin/python -m bench async_parity --estimators gae --extra trainer.algorithm.off_policy_correction.tis_ratio_type=sequence

One seed says little: sync and async part ways at step 2, and the sync rise alone spreads by +-0.15 over seeds.
``--seeds`` runs every arm once per ``trainer.seed`` and reports the mean paired gap with its standard error;
``--model-seed 42`` keeps the quickstart's warm start for all of them, so the seeds vary the data order, the
sampling and the value head's init alone (``trainer.seed`` also picks the built-in model's warm start, and some
seeds start near the reward ceiling):

    .venv/bin/python -m bench async_parity --estimators gae --seeds 42,1,2,3,4,5 --model-seed 42
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

from bench.train_job import private_ray_env, train_job
from bench.vs_trl import SETUPS, model_dir_for

GOAL = 0.03


def run_arm(estimator: str, mode: str, run_root: str, extra: list[str], seed: int | None = None,
            model_dir: str | None = None) -> dict:
    overrides = ["trainer.num_threads=1", "trainer.placement.colocate_all=false",
                 f"trainer.algorithm.advantage_estimator={estimator}"]
    if seed is not None:
        overrides.append(f"trainer.seed={seed}")
    if model_dir is not None:  # the same warm start for every seed: trainer.seed then varies data and sampling only
        overrides.append(f"trainer.policy.model.path={model_dir}")
    if mode == "async":
        overrides += ["trainer.async_one_step=true", *extra]
    run_id = f"{estimator}-{mode}" + ("" if seed is None else f"-seed{seed}")
    job = train_job("quickstart", run_root, run_id, overrides, env=private_ray_env())
    return {"estimator": estimator, "mode": mode, "seed": seed, "model_dir": model_dir, "overrides": overrides,
            **job.learning(),
            "staleness_max": max(r.get("async/staleness_max", 0.0) for r in job.reader.metrics())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--estimators", default="grpo,gae")
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--extra", nargs="*", default=[], help="overrides for the async arm only (experiments)")
    parser.add_argument("--seeds", default=None,
                        help="comma-separated trainer.seed values: every arm once per seed (default: the preset's seed)")
    parser.add_argument("--model-seed", type=int, default=None,
                        help="warm-start the built-in model at this seed for every arm, whatever --seeds says "
                             "(default: each run's trainer.seed picks its own warm start, as a user's run does)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [None]
    # the quickstart's built-in model warm-started at --model-seed (built once into the model cache)
    model_dir = None if args.model_seed is None else model_dir_for(SETUPS["tiny"], args.model_seed)
    run_root = tempfile.mkdtemp(prefix="skyrl-bench-async-parity-")
    runs = []
    for seed in seeds:
        for estimator in args.estimators.split(","):
            for mode in args.modes.split(","):
                runs.append(run_arm(estimator, mode, run_root, args.extra, seed, model_dir))
                print(json.dumps(runs[-1]), flush=True)
                if args.out:  # every finished arm is kept, whatever stops the rest
                    Path(args.out).write_text(json.dumps({"bench": "async_parity", "partial": True, "runs": runs},
                                                         indent=1) + "\n")
    verdict: dict[str, dict] = {}
    for estimator in args.estimators.split(","):
        for seed in seeds:
            by_mode = {r["mode"]: r["reward_gain"] for r in runs if r["estimator"] == estimator and r["seed"] == seed}
            if {"sync", "async"} <= by_mode.keys():
                gap = round(by_mode["sync"] - by_mode["async"], 4)
                key = estimator if seed is None else f"{estimator} seed {seed}"
                verdict[key] = {"sync_gain": by_mode["sync"], "async_gain": by_mode["async"],
                                "async_short_by": gap, "within_goal": gap <= GOAL}
        per_seed = [v for k, v in verdict.items() if k.split()[0] == estimator]
        if len(seeds) > 1 and len(per_seed) == len(seeds):
            gaps = [v["async_short_by"] for v in per_seed]
            mean_gap = round(statistics.mean(gaps), 4)
            verdict[f"{estimator} mean over seeds"] = {
                "sync_gain": round(statistics.mean(v["sync_gain"] for v in per_seed), 4),
                "async_gain": round(statistics.mean(v["async_gain"] for v in per_seed), 4),
                "async_short_by": mean_gap,
                # the paired gaps' standard error: how far the mean could be from the expected gap by chance
                "short_by_std_error": round(statistics.stdev(gaps) / len(gaps) ** 0.5, 4),
                "within_goal": mean_gap <= GOAL}
    result = {"bench": "async_parity", "goal_within": GOAL, "async_extra": args.extra, "seeds": seeds,
              "model_seed": args.model_seed, "verdict": verdict,
              "runs": runs, "cpus": os.cpu_count(), "when": time.strftime("%Y-%m-%dT%H:%M:%S")}
    print(json.dumps(verdict))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
