"""The dashboard following a run whose store is on S3: requests and wall time per refresh (issue 14).

    .venv/bin/python bench/s3_dashboard.py [--steps 1000] [--refreshes 50]

Starts the local S3 API (moto in server mode on 127.0.0.1, its own process: tests/s3_server.py), writes a
run of ``--steps`` steps there with ``RunWriter`` (the engine's metric names, status, events), then
follows it with a ``Dashboard`` as a notebook would (static mode: no widget front end), the "job" writing
one more step before each refresh:

- ``open_ms`` / ``open_requests``: the first refresh, which reads the whole history;
- ``refresh_ms_median`` / ``_max`` and ``requests_per_refresh_max``: the refreshes that follow, requests
  counted by the server (the listing, the grown metrics segment's byte range, status.json);
- ``idle_refresh_requests``: a refresh when nothing changed (the listing alone).

Target (issue 14): at most a few requests and under 200 ms per refresh. Prints one JSON line last and
writes ``bench/results/s3_dashboard.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

from bench import RESULTS, ROOT

RESULT = RESULTS / "s3_dashboard.json"
TARGETS = {"refresh_ms_median": 200.0, "requests_per_refresh_max": 4}


def step_metrics(step: int) -> dict[str, float]:
    """One step's metrics with the names and count the engine writes (~30 keys)."""
    m = {"reward/avg_raw_reward": min(0.9, 0.1 + step / 1500), "reward/std_raw_reward": 0.3,
         "reward/avg_pass_at_8": 0.6, "reward/mean_positive_reward": 0.9, "generate/avg_num_tokens": 24.0,
         "generate/max_num_tokens": 32.0, "generate/min_num_tokens": 3.0, "generate/stop_ratio": 0.9,
         "policy/policy_loss": -0.01, "policy/policy_entropy": 1.2, "policy/grad_norm": 0.8, "policy/policy_kl": 0.0,
         "policy/loss_metrics/clip_ratio": 0.01, "policy/lr": 1e-4, "trainer/tokens_per_second": 5100.0,
         "trainer/epoch": 0, "trainer/global_step": step,
         "policy/rollout_train_logprobs_abs_diff_max": 1e-5, "policy/rollout_train_logprobs_abs_diff_mean": 1e-6}
    for part in ("step", "generate", "policy_train", "sync_weights", "save_checkpoints", "wait_for_batch",
                 "wait_for_policy", "compute_advantages_and_returns"):
        m[f"timing/{part}"] = 0.1
    return m


def write_run(run_dir: str, steps: int) -> Any:
    """A running run of ``steps`` steps on the store at ``run_dir``; returns its writer."""
    from skyrl_core.runs import RunWriter

    writer = RunWriter(run_dir)
    writer.write_config({"trainer": {"max_training_steps": steps + 1000}})
    writer.set_status("running", step=0, total_steps=steps + 1000)
    writer.log_event("started", step=0)
    for step in range(1, steps + 1):
        writer.log_metrics(step, step_metrics(step))
        if step % 10 == 0:
            writer.log_event("checkpoint_saved", step=step, path=f"{run_dir}/checkpoints/global_step_{step}")
    writer.set_status("running", step=steps)
    return writer


def measure(server: Any, steps: int = 1000, refreshes: int = 50) -> dict[str, Any]:
    """Follow a ``steps``-step S3 run with a Dashboard for ``refreshes`` refreshes (see the module docstring)."""
    from skyrl_core import runs
    from skyrl_nb.dashboard import Dashboard

    run_dir = f"s3://{server.bucket}/bench-{uuid.uuid4().hex[:8]}/run"
    started = time.perf_counter()
    writer = write_run(run_dir, steps)
    write_s = time.perf_counter() - started
    dash = Dashboard(run_dir, static=True)
    before = server.total()
    t0 = time.perf_counter()
    dash.refresh()
    open_ms, open_requests = (time.perf_counter() - t0) * 1000, server.total() - before
    assert dash.points == steps, (dash.points, steps)
    times, requests = [], []
    for step in range(steps + 1, steps + 1 + refreshes):
        writer.log_metrics(step, step_metrics(step))
        writer.set_status(step=step)
        time.sleep(runs.LISTING_TTL_S)  # a dashboard polls at most twice a second
        before = server.total()
        t0 = time.perf_counter()
        dash.refresh()
        times.append((time.perf_counter() - t0) * 1000)
        requests.append(server.total() - before)
    assert dash.points == steps + refreshes and dash.step == steps + refreshes
    time.sleep(runs.LISTING_TTL_S)
    before = server.total()
    dash.refresh()  # nothing new
    idle = server.total() - before
    return {"steps": steps, "refreshes": refreshes, "write_s": round(write_s, 1),
            "metrics_segments": sum(1 for n in writer.store.list() if n.startswith("metrics.")),
            "open_ms": round(open_ms, 1), "open_requests": open_requests,
            "refresh_ms_median": round(statistics.median(times), 1), "refresh_ms_max": round(max(times), 1),
            "requests_per_refresh_max": max(requests), "requests_per_refresh_median": statistics.median(requests),
            "idle_refresh_requests": idle}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--refreshes", type=int, default=50)
    args = parser.parse_args(argv)
    import importlib.util
    import os

    # the tests' local S3 server (moto in its own process), loaded from its file: tests/ is no package
    spec = importlib.util.spec_from_file_location("s3_server", ROOT / "tests" / "s3_server.py")
    s3_server = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(s3_server)
    moto_s3 = s3_server.moto_s3

    with moto_s3() as server:
        os.environ.update(server.env)
        result = measure(server, args.steps, args.refreshes)
    result["targets"] = TARGETS
    result["met"] = (result["refresh_ms_median"] < TARGETS["refresh_ms_median"]
                     and result["requests_per_refresh_max"] <= TARGETS["requests_per_refresh_max"])
    RESULT.parent.mkdir(parents=True, exist_ok=True)
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
