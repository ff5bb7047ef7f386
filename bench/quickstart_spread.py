"""Does the quickstart learn the same on every CPU? The preset's full 190-step run for ``trainer.seed`` 1..8,
each under torch's native vector kernels and under ``ATEN_CPU_CAPABILITY=default`` (its portable ones, what
another kind of CPU does to the same code): 16 arms, each reported as the notebook's own figure
(``reward_change``: the means of the first and last 20 steps) plus the greedy eval scores.

The study is 8 seeds x 2 kernel modes and stops there. First the tiny model's warm start is built once per
kernel mode, each in its own fresh model cache, and the two ``model.safetensors`` are hashed: the warm start
is computed to be bit-identical across kernels (``skyrl_engine.models``), so the hashes must be equal, and
every arm of a mode then loads that mode's build. The RL phase runs with each mode's kernels, so the
trajectories differ between modes; that is expected.

    .venv/bin/python -m bench quickstart_spread --out bench/results/quickstart_spread.json [--jobs 2]

``--arms`` picks arms by name (``seed3``, ``seed3-isa-default``, ...); extra arms, not in the default set:
``seed42`` and ``seed42-isa-default`` (the preset's own seed, as the notebook runs it) and ``no-learning``
(seed 42 at ``lr=1e-9``: the rise noise alone gives). ``--arms`` with only extras writes their runs, the two
warm-start builds and no study verdict. ``--jobs``: runs at once
(each is one job process with one torch thread; the wall times grow when they share the cores).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.train_job import ROOT, private_ray_env, train_job

SEEDS = tuple(range(1, 9))
#: kernel mode -> the environment it adds (native: whatever torch picks on this CPU)
KERNELS: dict[str, dict[str, str]] = {"native": {}, "default": {"ATEN_CPU_CAPABILITY": "default"}}
GOAL_GAIN = 0.25

#: arm -> (kernel mode, overrides)
ARMS: dict[str, tuple[str, list[str]]] = {
    **{f"seed{s}{'' if k == 'native' else '-isa-' + k}": (k, [f"trainer.seed={s}"]) for s in SEEDS for k in KERNELS},
    # extras, not in the study: the preset's own seed (what the notebook and `make demo` run), and no learning
    "seed42": ("native", []),
    "seed42-isa-default": ("default", []),
    "no-learning": ("native", ["trainer.policy.optimizer_config.lr=1e-9"]),
}
EXTRA_ARMS = ("seed42", "seed42-isa-default", "no-learning")
DEFAULT_ARMS = [arm for arm in ARMS if arm not in EXTRA_ARMS]

BUILD = """
import json, sys, time
import torch
torch.set_num_threads(1)
from skyrl_core.config import load_config
from skyrl_engine.models import resolve_model_path
from skyrl_engine.tasks import load_prompts
cfg = load_config("quickstart")
started = time.perf_counter()
path = resolve_model_path(cfg.trainer.policy.model.path, load_prompts(cfg.data.train_data), cfg.trainer.seed)
print(json.dumps({"path": path, "build_s": round(time.perf_counter() - started, 1),
                  "capability": torch.backends.cpu.get_cpu_capability()}))
"""


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


def build_warm_start(kernel: str, cache: str) -> dict:
    """Build the quickstart's tiny model in ``cache`` under ``kernel``'s kernels (its own process); its
    directory, build time, torch's kernel choice and the sha256 of its ``model.safetensors``."""
    env = {**private_ray_env(KERNELS[kernel]), "SKYRL_NB_CACHE": cache}
    out = subprocess.run([sys.executable, "-c", BUILD], env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"warm start build ({kernel}) failed:\n{out.stderr[-2000:]}")
    info = json.loads(out.stdout.strip().splitlines()[-1])
    digest = hashlib.sha256(Path(info["path"], "model.safetensors").read_bytes()).hexdigest()
    return {"kernel": kernel, **info, "sha256": digest}


def run_arm(arm: str, run_root: str, caches: dict[str, str]) -> dict:
    kernel, overrides = ARMS[arm]
    env = {**private_ray_env(KERNELS[kernel]), "SKYRL_NB_CACHE": caches[kernel]}
    job = train_job("quickstart", run_root, arm, ["trainer.num_threads=1", *overrides], env=env)
    return {"arm": arm, "kernel": kernel, "env": KERNELS[kernel], "overrides": overrides, **job.learning()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arms", default=",".join(DEFAULT_ARMS))
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (default 2)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    arms = args.arms.split(",")
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        parser.error(f"--arms: unknown arm(s) {unknown}; allowed: {', '.join(ARMS)}")
    run_root = tempfile.mkdtemp(prefix="skyrl-bench-spread-")
    caches = {k: tempfile.mkdtemp(prefix=f"cache-{k}-", dir=run_root) for k in KERNELS}
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        builds = list(pool.map(lambda k: build_warm_start(k, caches[k]), KERNELS))
    for build in builds:
        print(json.dumps(build), flush=True)
    identical = len({b["sha256"] for b in builds}) == 1

    def one(arm: str) -> dict:
        row = run_arm(arm, run_root, caches)
        print(json.dumps(row), flush=True)
        return row

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(one, arms))
    learning = [r for r in runs if r["arm"] not in EXTRA_ARMS]
    gains = [r["reward_gain"] for r in learning]
    result = {"bench": "quickstart_spread", "cpu": _cpu_name(), "cpus": os.cpu_count(), "jobs": args.jobs,
              "study": f"{len(SEEDS)} seeds x {len(KERNELS)} kernel modes",
              "warm_start": {"builds": builds, "bit_identical": identical},
              "goal_gain": GOAL_GAIN, "min_gain": min(gains, default=None), "max_gain": max(gains, default=None),
              "all_reach_goal": min(gains) >= GOAL_GAIN if gains else None,
              "wall_s": round(time.perf_counter() - started, 1), "runs": runs}
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
