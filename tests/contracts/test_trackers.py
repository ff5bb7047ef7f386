"""The console tracker's step line: one stable pattern, which a SageMakerLogMonitoring rule matches."""

from __future__ import annotations

import re
from typing import Any

import pytest


def test_console_line_matches_the_log_monitoring_rule(capsys: pytest.CaptureFixture[str]) -> None:
    from skyrl_core.config import load_config
    from skyrl_engine.tracking import STEP_LINE_PATTERN, ConsoleTracker, log_monitoring_rule

    tracker = ConsoleTracker(load_config("quickstart", ["run.run_id=r1"]), total_steps=10)
    tracker.log_metrics(3, {"step": 3, "reward/avg_raw_reward": 0.41251, "trainer/tokens_per_second": 5012.34,
                            "timing/step": 1.2345})
    tracker.log_metrics(4, {"step": 4})  # missing values print as '-'
    first, second = capsys.readouterr().out.splitlines()
    assert first == "[skyrl_engine] step 3/10 reward=0.4125 tokens_per_s=5012.3 step_s=1.234 run=r1"
    assert second == "[skyrl_engine] step 4/10 reward=- tokens_per_s=- step_s=- run=r1"
    assert re.search(STEP_LINE_PATTERN, first) and re.search(STEP_LINE_PATTERN, second)
    assert not re.search(STEP_LINE_PATTERN, "[skyrl_engine] training 10 steps into /runs/r1 (sync)")
    toolkit: Any = pytest.importorskip("toolkit_for_ray_on_sagemaker_ai.log_monitoring")
    wire = toolkit.LogMonitorConfig(rules=[log_monitoring_rule(20)], action="notify").to_wire_format()
    (rule,) = wire["rules"]
    assert rule["log_pattern"] == STEP_LINE_PATTERN and rule["timeout_minutes"] == 20 and rule["type"] == "log_pattern"
