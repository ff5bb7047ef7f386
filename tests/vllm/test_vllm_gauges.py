"""vLLM's queue and KV-cache figures in Ray's own metrics export (``skyrl_engine.vllm_metrics``; issue 37's item 7).

A bare Ray head exporting metrics every second (tests/ray_metrics_head.py), a driver on it (vllm_gauges_driver.py)
with one vLLM-CPU engine actor started with a run id and a 64 MiB KV cache, and one batch of 64 prompts x 8
samples x 200 tokens (~100 k tokens of KV against room for ~64 k): while it generates, the export is scraped every
0.3 s. It must show sequences running, sequences waiting for blocks, the cache in use, and after the batch the
generated-token count equal to what the driver got back, token for token. ~45-60 s here (the engine starts in ~17 s).
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ray_metrics_head import RAY_ENV, gauges, start_head

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUN_ID = "vllm-gauges"


def test_vllm_queue_and_kv_cache_gauges_in_rays_export(vllm_python: str, tiny_model_dirs: tuple[str, str]) -> None:
    head = start_head()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)} | RAY_ENV
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "backend"), str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, str(HERE / "vllm_gauges_driver.py"), head.address, vllm_python,
                             tiny_model_dirs[0], RUN_ID], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    try:
        ready = _next_json(proc, lines, "ready", timeout_s=240)
        assert "EngineGauges" in (ready["info"]["gauges"] or ""), ready  # the engine keeps its gauges
        seen: dict[str, float] = {}
        result = None
        while result is None:
            for (name, _labels), value in gauges(head.scrape(), RUN_ID).items():
                seen[name] = max(seen.get(name, 0.0), value)
            result = _poll_json(proc, lines, "generated", wait_s=0.3)
        assert result["sequences"] == 64 * 8 and result["generated"] == 64 * 8 * 200
        # after the batch: the counts settle on what the driver got back, exactly
        deadline = time.monotonic() + 20
        while True:
            now = gauges(head.scrape(), RUN_ID)
            if now.get(("ray_skyrl_vllm_generation_tokens", (("engine", "0"),))) == result["generated"] \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        engine = (("engine", "0"),)
        assert now[("ray_skyrl_vllm_generation_tokens", engine)] == result["generated"], now
        assert now[("ray_skyrl_vllm_prompt_tokens", engine)] >= result["prompt_tokens"], now
        assert now[("ray_skyrl_vllm_requests_running", engine)] == 0 and now[("ray_skyrl_vllm_requests_waiting", engine)] == 0
        # while it generated: sequences ran, some waited for KV blocks, and the cache was in use
        assert seen["ray_skyrl_vllm_requests_running"] > 0, seen
        assert seen["ray_skyrl_vllm_requests_waiting"] > 0, seen
        assert 0 < seen["ray_skyrl_vllm_kv_cache_usage"] <= 1, seen
        # the Grafana dashboard's vLLM panels query what the engine exported
        panels = json.loads((ROOT / "docs" / "grafana" / "skyrl-nb.json").read_text())["panels"]
        queried = {n for p in panels for t in p["targets"] for n in re.findall(r"\bray_skyrl_vllm_[a-z_]+\b", t["expr"])}
        assert {"ray_skyrl_vllm_requests_waiting", "ray_skyrl_vllm_kv_cache_usage"} <= queried <= {n for n, _ in now}, queried
        print(f"peaks while generating: {seen}")
    finally:
        if proc.poll() is None:
            proc.stdin.close()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        head.stop()
    print("".join(lines[-5:]))


def _poll_json(proc: subprocess.Popen, lines: list[str], key: str, wait_s: float) -> dict | None:
    """The driver's JSON line holding ``key`` if it printed it within ``wait_s`` (fails if the driver died)."""
    reader = _reader(proc)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            line = reader.get(timeout=max(deadline - time.monotonic(), 0.01))
        except queue.Empty:
            return None
        if line is None:
            pytest.fail(f"the driver ended (exit {proc.wait()}):\n{''.join(lines[-40:])}")
        lines.append(line)
        if line.startswith("{") and key in (found := json.loads(line)):
            return found


_readers: dict[int, queue.Queue] = {}


def _reader(proc: subprocess.Popen) -> queue.Queue:
    """The driver's output lines as a queue (None at its end), filled by a thread: a pipe read never blocks a scrape."""
    if proc.pid not in _readers:
        lines: queue.Queue = queue.Queue()

        def pump() -> None:
            for line in proc.stdout:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        _readers[proc.pid] = lines
    return _readers[proc.pid]


def _next_json(proc: subprocess.Popen, lines: list[str], key: str, timeout_s: float) -> dict:
    found = _poll_json(proc, lines, key, wait_s=timeout_s)
    if found is None:
        pytest.fail(f"no {key!r} from the driver in {timeout_s:.0f} s:\n{''.join(lines[-40:])}")
    return found
