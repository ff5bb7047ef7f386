"""`make demo`: run notebooks/quickstart.ipynb headless with papermill and print one summary line.

    python -m skyrl_nb.demo [--steps N] [--out PATH] [--keep-cluster]

The executed notebook is kept at `notebooks/quickstart.out.ipynb` (git-ignored), the run under
`runs/`. The kernel is this interpreter: a kernelspec named `skyrl-nb` pointing at `sys.executable`
is installed into this environment first, so a fresh clone needs nothing else. The dashboard
renders as a static SVG (`SKYRL_NB_STATIC=1`), which keeps the notebook small.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
NOTEBOOK = REPO / "notebooks" / "quickstart.ipynb"
KERNEL_NAME = "skyrl-nb"


def ensure_kernel(name: str = KERNEL_NAME) -> str:
    """Install (or refresh) a kernelspec `name` whose argv runs this interpreter; returns the name."""
    from ipykernel.kernelspec import install
    from jupyter_client.kernelspec import KernelSpecManager

    try:
        spec = KernelSpecManager().get_kernel_spec(name)
        if spec.argv and spec.argv[0] == sys.executable:
            return name
    except Exception:  # no such kernel yet
        pass
    install(kernel_name=name, display_name=f"Python ({name})", prefix=sys.prefix)
    return name


def run_quickstart(out: Path, parameters: dict[str, Any], *, kernel: str | None = None,
                   log_output: bool = False) -> float:
    """Execute the quickstart with papermill into `out`; returns the wall time in seconds."""
    import papermill

    os.environ.setdefault("SKYRL_NB_STATIC", "1")
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    papermill.execute_notebook(str(NOTEBOOK), str(out), parameters=parameters, kernel_name=kernel or ensure_kernel(),
                               progress_bar=False, log_output=log_output, cwd=str(REPO))
    return time.monotonic() - start


def summarize(run_dir: Path) -> dict[str, Any]:
    """Reward first -> last (means of a few steps at each end, as the notebook computes them)."""
    from skyrl_core.runs import RunReader

    run = RunReader(run_dir)
    rows = run.metrics()
    rewards = [r["reward/avg_raw_reward"] for r in rows if r.get("reward/avg_raw_reward") is not None]
    k = max(1, min(5, len(rewards) // 4))
    first = sum(rewards[:k]) / k if rewards else float("nan")
    last = sum(rewards[-k:]) / k if rewards else float("nan")
    return {"run_id": run.run_id, "state": run.status().get("state"), "steps": len(rows),
            "reward_first": first, "reward_last": last}


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit 0 when the notebook ran clean (its last cell asserts reward rose)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150, help="trainer.max_training_steps")
    parser.add_argument("--out", type=Path, default=REPO / "notebooks" / "quickstart.out.ipynb")
    parser.add_argument("--run-root", type=Path, default=REPO / "runs")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the local Ray head running")
    args = parser.parse_args(argv)

    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    params = {"max_training_steps": args.steps, "run_root": str(args.run_root.resolve()), "run_id": run_id,
              "keep_cluster": args.keep_cluster}
    error = None
    start = time.monotonic()
    try:
        run_quickstart(args.out, params)
    except Exception as exc:  # papermill raises PapermillExecutionError with the failing cell
        error = exc
    wall = time.monotonic() - start
    size_kb = args.out.stat().st_size / 1024 if args.out.exists() else 0.0
    s = summarize(args.run_root / run_id) if (args.run_root / run_id).exists() else {
        "state": "not started", "steps": 0, "reward_first": float("nan"), "reward_last": float("nan")}
    print(f"skyrl-nb demo: reward {s['reward_first']:.3f} -> {s['reward_last']:.3f} "
          f"({s['reward_last'] - s['reward_first']:+.3f}) over {s['steps']} steps, {s['state']}, "
          f"wall {wall:.0f} s, notebook {size_kb:.0f} KB at {os.path.relpath(args.out, Path.cwd())}")
    record = {**s, "wall_s": wall, "notebook_kb": size_kb, "notebook": str(args.out)}
    (REPO / "runs").mkdir(exist_ok=True)
    (REPO / "runs" / "demo-last.json").write_text(json.dumps(record, indent=1))
    if error is not None:
        print(f"the notebook failed: {str(error).strip().splitlines()[-1] if str(error).strip() else error}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
