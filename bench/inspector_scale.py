"""Scale check for the trajectory inspector: a 10k-step, 100k-trajectory run store.

    .venv/bin/python -m bench inspector_scale [--steps 10000] [--per-step 10] [--keep DIR]

Builds a synthetic run store with pyarrow in a temp dir (same layout and columns as the engine writes,
per-token data included), then, in a fresh child process so the builder's memory does not count:

- ``open_s``: ``TrajectoryInspector(run_dir)`` until its first view is ready (imports excluded);
- ``refresh_ms``: median ``insp.refresh()`` right after the "job" wrote one more step;
- ``kernel_mem_growth_mb``: peak RSS growth over the whole session (open, 20 refreshes, paging through
  60 steps, filters, and a full "this prompt across steps" scan of every part).

Targets (issue 4): open_s < 1, refresh_ms < 50, kernel_mem_growth_mb < 300. Prints one JSON line last
and writes ``bench/results/inspector_scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "bench" / "results" / "inspector_scale.json"
TARGETS = {"open_s": 1.0, "refresh_ms": 50.0, "kernel_mem_growth_mb": 300.0}


def build_store(run_dir: Path, steps: int, per_step: int, group_size: int = 5, tokens: int = 24) -> None:
    """Write ``steps`` parts of ``per_step`` rows each, plus metrics.jsonl and status.json."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    traj = run_dir / "trajectories"
    traj.mkdir(parents=True, exist_ok=True)
    prompts = [f"What is {a} + {b}? Answer with the number only." for a, b in rng.integers(0, 99, (500, 2))]
    groups = np.arange(per_step) // group_size
    offsets = pa.array(np.arange(0, (per_step + 1) * tokens, tokens, dtype=np.int32))

    def lists(values) -> pa.Array:  # (rows, tokens) ndarray -> list<...> column without Python lists
        return pa.ListArray.from_arrays(offsets, pa.array(values.reshape(-1)))
    with (run_dir / "metrics.jsonl").open("w") as metrics:
        for step in range(1, steps + 1):
            reward = (rng.random(per_step) < min(0.9, 0.2 + step / steps)).astype(np.float64)
            adv = reward - reward.reshape(-1, group_size).mean(axis=1).repeat(group_size)
            pick = rng.integers(0, len(prompts), per_step // group_size).repeat(group_size)
            lp = rng.normal(-0.6, 0.5, (per_step, tokens)).clip(max=0).astype(np.float32)
            table = pa.table({
                "step": pa.array(np.full(per_step, step, dtype=np.int64)),
                "uid": pa.array([f"{step}-{i}" for i in range(per_step)]),
                "group": pa.array(groups),
                "prompt": pa.array([prompts[i] for i in pick]),
                "response": pa.array([f"{int(r * 42)} because {step % 97}" for r in reward]),
                "reward": pa.array(reward),
                "advantage": pa.array(adv),
                "num_tokens": pa.array(np.full(per_step, tokens, dtype=np.int64)),
                "finish_reason": pa.array(np.where(rng.random(per_step) < 0.1, "length", "stop")),
                "env_class": pa.array(["gsm8k"] * per_step),
                "data_source": pa.array(["synthetic"] * per_step),
                "token_ids": lists(rng.integers(0, 100, (per_step, tokens), dtype=np.int32)),
                "token_logprobs": lists(lp),
                "token_advantages": lists(np.repeat(adv[:, None], tokens, axis=1).astype(np.float32)),
                "discarded_reason": pa.array([None] * per_step, pa.string()),
            })
            pq.write_table(table, traj / f"step_{step:06d}.parquet", compression="zstd")
            metrics.write(json.dumps({"step": step, "time": time.time(),
                                      "reward/avg_raw_reward": float(reward.mean())}) + "\n")
    (run_dir / "status.json").write_text(json.dumps({
        "state": "running", "step": steps, "total_steps": steps * 2, "heartbeat": time.time(),
        "started_at": time.time(), "ended_at": None, "error": None, "pid": None}))
    (run_dir / "config.yaml").write_text("run:\n  run_id: scale\n")


def measure(run_dir: Path) -> dict[str, float]:
    """Open, refresh and browse the inspector on ``run_dir``; return the numbers (child process)."""
    import gc

    import psutil
    import pyarrow as pa
    import pyarrow.parquet as pq

    from skyrl_widgets.inspector import TrajectoryInspector

    proc = psutil.Process()
    gc.collect()
    base = proc.memory_info().rss
    peak = base

    def sample() -> None:
        nonlocal peak
        peak = max(peak, proc.memory_info().rss)

    t0 = time.perf_counter()
    insp = TrajectoryInspector(run_dir, auto_refresh=0)
    open_s = time.perf_counter() - t0
    assert insp.view["groups"], "the inspector opened with an empty view"
    sample()

    last = insp.steps[-1]
    template = pq.read_table(run_dir / "trajectories" / f"step_{last:06d}.parquet")
    noop = []
    for _ in range(5):
        t = time.perf_counter()
        insp.refresh()
        noop.append((time.perf_counter() - t) * 1000)
    refreshes = []
    for k in range(1, 21):
        step = last + k
        table = template.set_column(0, "step", pa.array([step] * template.num_rows))
        tmp = run_dir / "trajectories" / f".step_{step:06d}.parquet.tmp"
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, run_dir / "trajectories" / f"step_{step:06d}.parquet")
        t = time.perf_counter()
        added = insp.refresh()
        refreshes.append((time.perf_counter() - t) * 1000)
        assert added == [step] and insp.view["step"] == step, (added, insp.view.get("step"))
        sample()

    # browse: step through 60 steps, page and filter, as a person would
    browse = []
    for step in insp.steps[:: max(1, len(insp.steps) // 60)][:60]:
        t = time.perf_counter()
        insp.show_step(step)
        browse.append((time.perf_counter() - t) * 1000)
        sample()
    insp.set_filters(zero_variance="hide", sort="reward_desc")
    insp.set_filters(search="because", finish_reason="stop")
    sample()

    # "this prompt across steps" until every part is scanned
    t = time.perf_counter()
    prompt = insp.view["groups"][0]["prompt"] if insp.view["groups"] else insp.frame()["prompt"][0]
    result = insp.drift(prompt, budget_s=0.5)
    while not result["done"]:
        result = insp.drift(result["prompt"], budget_s=0.5)
        sample()
    drift_s = time.perf_counter() - t
    sample()
    return {
        "open_s": round(open_s, 4),
        "refresh_ms": round(statistics.median(refreshes), 2),
        "kernel_mem_growth_mb": round((peak - base) / 2**20, 1),
        "refresh_ms_max": round(max(refreshes), 2),
        "noop_refresh_ms": round(statistics.median(noop), 2),
        "show_step_ms_median": round(statistics.median(browse), 2),
        "drift_full_scan_s": round(drift_s, 2),
        "drift_points": len(result["points"]),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--per-step", type=int, default=10)
    ap.add_argument("--keep", type=Path, help="build into (or reuse) this run dir instead of a temp dir")
    ap.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # child mode
    args = ap.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure)))
        return 0

    with tempfile.TemporaryDirectory(prefix="skyrl-inspector-scale-") as tmp:
        run_dir = args.keep or Path(tmp) / "scale"
        t = time.perf_counter()
        if not (run_dir / "trajectories" / f"step_{args.steps:06d}.parquet").exists():
            build_store(run_dir, args.steps, args.per_step)
        build_s = time.perf_counter() - t
        child = subprocess.run([sys.executable, __file__, "--measure", str(run_dir)],
                               capture_output=True, text=True, cwd=ROOT)
        if child.returncode != 0:
            sys.stderr.write(child.stdout + child.stderr)
            return child.returncode
        result = json.loads(child.stdout.strip().splitlines()[-1])
    result.update(steps=args.steps, trajectories=args.steps * args.per_step, build_s=round(build_s, 1))
    result["meets_targets"] = all(result[k] < v for k, v in TARGETS.items())
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0 if result["meets_targets"] else 1


if __name__ == "__main__":
    sys.exit(main())
