"""The engine's Prometheus exporter on its own (the real run is scraped in tests/remote/test_remote_cluster.py),
and the Grafana dashboard JSON against the names it serves."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

GRAFANA = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "skyrl-nb.json"


def test_rows_become_labelled_series() -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from skyrl_engine.prometheus import METRIC_NAMES, StepMetricsExporter

    exporter = StepMetricsExporter("run-a", 0, total_steps=10, addr="127.0.0.1")
    try:
        exporter.observe(3, {"step": 3, "reward/avg_raw_reward": 0.5, "reward/avg_pass_at_4": 0.75,
                             "timing/generate": 1.5, "async/staleness_max": 1, "eval/all/avg_score": 0.25,
                             "trainer/tokens_per_second": 900.0, "note": "text is skipped"})
        text = urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics", timeout=5).read().decode()
    finally:
        exporter.close()
    got = {(s.name, tuple(sorted(s.labels.items()))): s.value
           for family in text_string_to_metric_families(text) for s in family.samples}
    assert got[("skyrl_reward_mean", (("run_id", "run-a"),))] == 0.5
    assert got[("skyrl_pass_at_n", (("n", "4"), ("run_id", "run-a")))] == 0.75
    assert got[("skyrl_step_time_seconds", (("part", "generate"), ("run_id", "run-a")))] == 1.5
    assert got[("skyrl_staleness_steps", (("run_id", "run-a"), ("stat", "max")))] == 1
    assert got[("skyrl_step", (("run_id", "run-a"),))] == 3 and got[("skyrl_total_steps", (("run_id", "run-a"),))] == 10
    assert got[("skyrl_memory_bytes", (("device", ""), ("kind", "cpu_peak_rss"), ("run_id", "run-a")))] > 0
    assert {name for name, _ in got} <= set(METRIC_NAMES)


def test_grafana_dashboard_queries_only_served_names() -> None:
    from skyrl_engine.prometheus import METRIC_NAMES

    dashboard = json.loads(GRAFANA.read_text())
    assert dashboard["uid"] == "skyrl-nb" and isinstance(dashboard["panels"], list)
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"datasource", "run_id"}
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and all(p["targets"] and p["gridPos"] for p in dashboard["panels"])
    queried = {n for p in dashboard["panels"] for t in p["targets"] for n in re.findall(r"\b(skyrl_[a-z_]+)\b", t["expr"])}
    assert queried <= set(METRIC_NAMES), queried - set(METRIC_NAMES)
    assert {"skyrl_reward_mean", "skyrl_step_time_seconds", "skyrl_eval_score", "skyrl_tokens_per_second"} <= queried
