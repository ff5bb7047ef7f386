"""How much the quickstart learns, and how much that depends on the machine: the preset's full run under
several settings, one after the other, each reported as the notebook's own figure (``reward_change``: the
mean of the first and last 20 steps) plus the greedy eval scores.

Arms (each ``python -m skyrl_engine train --config quickstart``, one thread):

- ``seed42``: the preset as ``make demo`` runs it;
- ``seed42-isa-default``: the same with ``ATEN_CPU_CAPABILITY=default`` (torch's portable kernels instead of
  AVX2/AVX-512) and a fresh model cache, so the tiny model's warm start is rebuilt with those kernels too:
  what another kind of CPU does to the same code;
- ``seed2``: another seed (another warm start and other batches);
- ``no-learning``: ``lr=1e-9``, the same data and sampling with no learning: the rise noise alone gives.

    .venv/bin/python -m bench quickstart_spread --out bench/results/quickstart_spread.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

from bench.train_job import private_ray_env, train_job

#: arm -> (environment variables, overrides, build the tiny model afresh in its own model cache)
ARMS: dict[str, tuple[dict[str, str], list[str], bool]] = {
    "seed42": ({}, [], False),
    "seed42-isa-default": ({"ATEN_CPU_CAPABILITY": "default"}, [], True),
    "seed2": ({}, ["trainer.seed=2"], False),
    "no-learning": ({}, ["trainer.policy.optimizer_config.lr=1e-9"], False),
}


def _cpu_name() -> str:
    """The CPU's model name and the vector ISAs torch can pick from (avx2, avx512f, amx_*)."""
    first = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags")) and ":" in line:
                name = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    isa = sorted({f for f in name.split() if f.startswith(("avx2", "avx512f", "amx"))})
                    return f"{first} ({' '.join(isa)})"
                first = name
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_arm(arm: str, run_root: str) -> dict:
    env_extra, overrides, fresh_cache = ARMS[arm]
    env = private_ray_env(env_extra)
    if fresh_cache:
        env["SKYRL_NB_CACHE"] = tempfile.mkdtemp(prefix="cache-", dir=run_root)
    job = train_job("quickstart", run_root, arm, ["trainer.num_threads=1", *overrides], env=env)
    return {"arm": arm, "env": env_extra, "fresh_model_cache": fresh_cache, "overrides": overrides,
            **job.learning()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=",".join(ARMS))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    run_root = tempfile.mkdtemp(prefix="skyrl-bench-spread-")
    runs = []
    for arm in args.arms.split(","):
        runs.append(run_arm(arm, run_root))
        print(json.dumps(runs[-1]), flush=True)
    result = {"bench": "quickstart_spread", "cpu": _cpu_name(),
              "cpus": os.cpu_count(), "runs": runs}
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
