"""`%skyrl` over a run root on S3 (moto's server): list, status and dashboard read the run store there."""

from __future__ import annotations

import uuid
from typing import Any

from skyrl_core.runs import RunWriter


def test_magics_read_runs_on_s3(shell: Any, s3: Any, monkeypatch: Any) -> None:
    monkeypatch.setenv("SKYRL_NB_STATIC", "1")
    root = f"s3://{s3.bucket}/magics-{uuid.uuid4().hex[:6]}"
    writer = RunWriter(f"{root}/s3-run")
    writer.set_status("running", step=0, total_steps=3)
    for step in (1, 2):
        writer.log_metrics(step, {"reward/avg_raw_reward": 0.25 * step})
        writer.set_status(step=step)
    shell.run_line_magic("config", f"SkyrlMagics.run_root = {root!r}")
    listed = shell.run_line_magic("skyrl", "list")
    assert [s.run_id for s in listed] == ["s3-run"] and listed[0].last_reward == 0.5
    run = shell.run_line_magic("skyrl", "status s3-run")
    assert run.run_dir == f"{root}/s3-run" and run.status()["step"] == 2
    dash = shell.run_line_magic("skyrl", "dashboard s3-run")  # static: SKYRL_NB_STATIC=1
    dash.refresh()
    assert dash.points == 2
    writer.log_metrics(3, {"reward/avg_raw_reward": 0.9})
    writer.set_status("succeeded", step=3)
    dash.refresh()
    assert dash.points == 3 and dash.state == "succeeded"
    assert "s3-run: succeeded, step 3/3, reward 0.250 -> 0.900 (+0.650; first and last step of 3)" in dash.header()
