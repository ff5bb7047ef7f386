"""The engine's phase and step gauges in Ray's own metrics export (what HyperPod observability scrapes), read from
a local head's metrics export port while a real run is held in step 5's generation (the shared ``scripted_run``
of conftest.py: ~30 s here, once for this file and test_alerts.py); the Grafana dashboard's phase panels
query those names."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import HOLD_AT, STEPS

GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "skyrl-nb.json"

pytestmark = pytest.mark.slow


def test_phase_and_step_gauges_come_through_rays_metrics_export(scripted_run: Any) -> None:
    from skyrl_core.choices import Phase

    held = scripted_run.held_gauges
    assert held, f"no ray_skyrl_* series with the run's id were exported; output:\n{scripted_run.output[-3000:]}"
    # step 4 is the last one written; step 5 is generating (its reward function holds it)
    assert held[("ray_skyrl_step", ())] == HOLD_AT - 1
    assert held[("ray_skyrl_total_steps", ())] == STEPS
    phases = {dict(labels)["phase"]: value for (name, labels), value in held.items() if name == "ray_skyrl_phase"}
    assert phases == {p.value: (1.0 if p is Phase.GENERATE else 0.0) for p in Phase}
    # the step metrics ride along under the Prometheus exporter's names, with ray_ in front
    assert held[("ray_skyrl_reward_mean", ())] == 1.0  # steps 1-4 score 1.0
    assert held[("ray_skyrl_step_time_seconds", (("part", "generate"),))] > 0
    assert held[("ray_skyrl_tokens_per_second", ())] > 0
    assert held[("ray_skyrl_memory_bytes", (("device", ""), ("kind", "cpu_peak_rss")))] > 0
    assert not any(labels and dict(labels).get("kind", "").startswith("gpu") for _, labels in held)  # CPU: no GPU

    # the Grafana dashboard's phase panels query what Ray exported
    panels = json.loads(GRAFANA.read_text())["panels"]
    queried = {n for p in panels for t in p["targets"] for n in re.findall(r"\bray_skyrl_[a-z_]+\b", t["expr"])}
    # the vLLM engines' series come from engine actors this torch-sampler run has none of: tests/vllm/test_vllm_gauges.py
    queried = {n for n in queried if not n.startswith("ray_skyrl_vllm_")}
    assert "ray_skyrl_phase" in queried and queried <= {name for name, _ in held}
