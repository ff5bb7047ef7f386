"""A bare ``ray start --head`` that exports Ray's metrics every second, and a reader of its ``ray_skyrl_*`` series:
shared by the tests that read the engine's gauges from Ray's own metrics export (tests/tracking, tests/vllm)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from ray_clusters import _free_ports, _stop_node


@dataclass
class RayHead:
    """A ``ray start --head`` in its own session, with its GCS address and metrics export port."""

    proc: subprocess.Popen
    address: str
    metrics_port: int
    temp_dir: str

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as answer:
            return answer.read().decode()

    def stop(self) -> None:
        """The head's processes and the workers its raylet started: SIGTERM, then SIGKILL after 5 s."""
        _stop_node(self.proc, grace_s=5.0)
        shutil.rmtree(self.temp_dir, ignore_errors=True)


RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           # every second instead of Ray's 10 s: the test sees a gauge ~1 s after the driver sets it
           "RAY_metrics_report_interval_ms": "1000"}


def start_head() -> RayHead:
    """A one-CPU head on 127.0.0.1 with free ports and no dashboard; returns once it serves its metrics."""
    gcs, metrics, agent, agent_grpc, runtime_env = _free_ports(5)
    temp = tempfile.mkdtemp(prefix="sk-rm-", dir="/tmp")  # Ray's socket paths must stay short
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN")} | RAY_ENV
    env.update(RAY_agent_register_timeout_ms="120000", RAY_raylet_start_wait_time_s="120")
    ray = str(Path(sys.executable).with_name("ray"))
    with open(Path(temp) / "head.log", "wb") as log:
        proc = subprocess.Popen(
            [ray, "start", "--head", "--block", f"--port={gcs}", f"--metrics-export-port={metrics}",
             f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
             f"--runtime-env-agent-port={runtime_env}", "--include-dashboard=false", "--num-cpus=1",
             f"--temp-dir={temp}", "--node-ip-address=127.0.0.1", "--disable-usage-stats", "--no-monitor"],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    head = RayHead(proc, f"127.0.0.1:{gcs}", metrics, temp)
    deadline = time.monotonic() + 180
    while True:
        try:
            head.scrape()
            return head
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                text = (Path(temp) / "head.log").read_text(errors="replace")[-2000:]
                head.stop()
                pytest.fail(f"the Ray head did not serve its metrics: {text}")
            time.sleep(0.5)


def gauges(text: str, run_id: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The ``ray_skyrl_*`` samples of ``run_id`` in a metrics page: ``{(name, labels but run_id and Ray's): value}``."""
    from prometheus_client.parser import text_string_to_metric_families

    ray_labels = {"Component", "NodeAddress", "SessionName", "Version", "WorkerId", "JobId"}
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.startswith("ray_skyrl_") and s.labels.get("run_id") == run_id:
                labels = tuple(sorted((k, v) for k, v in s.labels.items()
                                      if k != "run_id" and k not in ray_labels and not k.startswith("otel_")))
                out[(s.name, labels)] = s.value
    return out
