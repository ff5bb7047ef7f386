"""`make demo`: run notebooks/quickstart.ipynb headless with papermill and print one summary line.

    python -m skyrl_nb.demo [--steps N] [--out PATH] [--keep-cluster]

The executed notebook is kept at `notebooks/quickstart.out.ipynb` (git-ignored), the run under
`runs/`. The kernel is this interpreter: a kernelspec named `skyrl-nb` pointing at `sys.executable`
is installed into this environment first, so a fresh clone needs nothing else. The dashboard
renders as a static SVG (`SKYRL_NB_STATIC=1`), which keeps the notebook small. While the notebook runs,
a line every few seconds says where the run is (step, reward, ETA: :func:`progress_lines`). "Reward first
-> last" is `skyrl_core.runs.reward_change`, as in the notebook and the dashboard.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable
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


def kernel_transport() -> Any:
    """The kernel manager's settings for how the executor talks to the kernel: never plain TCP.

    With pyzmq built with CurveZMQ (the usual wheels), TCP encrypted with keys the manager makes for each
    kernel (`transport_encryption`; the kernelspec ipykernel installs says it supports it); without, IPC
    (Unix sockets in a private folder). Plain TCP makes the kernel warn "running over TCP without
    encryption" on every start, and is readable by anyone on the machine.
    """
    import tempfile

    import zmq
    from traitlets.config import Config

    if zmq.has("curve"):
        return Config({"KernelManager": {"transport_encryption": "required"}})
    folder = Path(tempfile.mkdtemp(prefix="skyrl-nb-kernel-"))  # 0700: only this user reaches the sockets
    return Config({"KernelManager": {"transport": "ipc", "ip": str(folder / "kernel")}})


def execute(notebook: Path, out: Path, parameters: dict[str, Any], *, kernel: str | None = None,
            log_output: bool = False, cwd: Path = REPO) -> float:
    """Execute `notebook` with papermill into `out` on this interpreter's kernel; returns the wall time in seconds."""
    import papermill

    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    papermill.execute_notebook(str(notebook), str(out), parameters=parameters, kernel_name=kernel or ensure_kernel(),
                               progress_bar=False, log_output=log_output, cwd=str(cwd), config=kernel_transport())
    return time.monotonic() - start


def run_quickstart(out: Path, parameters: dict[str, Any], *, kernel: str | None = None,
                   log_output: bool = False) -> float:
    """Execute the quickstart with papermill into `out`; returns the wall time in seconds."""
    os.environ.setdefault("SKYRL_NB_STATIC", "1")
    return execute(NOTEBOOK, out, parameters, kernel=kernel, log_output=log_output)


def summarize(run_dir: Path) -> dict[str, Any]:
    """State, steps and reward first -> last (``RunReader.reward_change``: what the notebook prints)."""
    from skyrl_core.runs import RunReader

    run = RunReader(run_dir)
    change = run.reward_change()
    nan = float("nan")
    return {"run_id": run.run_id, "state": run.status().get("state"), "steps": len(run.metrics()),
            "reward_first": nan if change.first is None else change.first,
            "reward_last": nan if change.last is None else change.last, "reward": str(change)}


def progress_lines(run_dir: Path, stop: threading.Event, every_s: float = 5.0,
                   say: Callable[[str], None] = print) -> None:
    """Until ``stop`` is set: every ``every_s`` seconds one line on where the run is (step / total, reward of
    the last step, ETA at the recent pace), read from its run store with the dashboard's own reader."""
    from skyrl_nb.dashboard import Dashboard

    dash: Any = None
    started = time.monotonic()
    while not stop.wait(every_s):
        if dash is None:
            if not (run_dir / "status.json").exists():
                say(f"demo: starting the Ray head and the job ({time.monotonic() - started:.0f} s)")
                continue
            dash = Dashboard(run_dir, static=True)
        dash.refresh()
        rewards = [r for r in dash.series.data["reward_mean"] if r is not None]
        eta = dash.eta_s()
        say(f"demo: step {dash.step}/{dash.total_steps or '?'}, {dash.state}"
            + (f", reward {rewards[-1]:.3f}" if rewards else "")
            + (f", ETA {eta / 60:.0f} min {eta % 60:02.0f} s" if eta is not None else ""))


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit 0 when the notebook ran clean (its last cell asserts reward rose)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None,
                        help="trainer.max_training_steps (default: the quickstart preset's, as in the notebook)")
    parser.add_argument("--out", type=Path, default=REPO / "notebooks" / "quickstart.out.ipynb")
    parser.add_argument("--run-root", type=Path, default=REPO / "runs")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the local Ray head running")
    args = parser.parse_args(argv)

    run_id = f"demo-{time.strftime('%Y%m%d-%H%M%S')}"
    params = {"run_root": str(args.run_root.resolve()), "run_id": run_id, "keep_cluster": args.keep_cluster,
              **({"max_training_steps": args.steps} if args.steps else {})}
    error = None
    start = time.monotonic()
    stop = threading.Event()
    reporter = threading.Thread(target=progress_lines, args=(args.run_root / run_id, stop), daemon=True,
                                kwargs={"say": lambda line: print(line, flush=True)})
    reporter.start()
    try:
        run_quickstart(args.out, params)
    except Exception as exc:  # papermill raises PapermillExecutionError with the failing cell
        error = exc
    finally:
        stop.set()
        reporter.join(timeout=10)
    wall = time.monotonic() - start
    size_kb = args.out.stat().st_size / 1024 if args.out.exists() else 0.0
    s = summarize(args.run_root / run_id) if (args.run_root / run_id).exists() else {
        "state": "not started", "steps": 0, "reward_first": float("nan"), "reward_last": float("nan")}
    print(f"skyrl-nb demo: reward {s.get('reward', 'no reward yet')}, {s['steps']} steps, {s['state']}, "
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
