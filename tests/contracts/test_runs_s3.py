"""The run store on an object store (``run.run_root=s3://...``), against a real S3 API (moto's server).

The same contract as on a local disk (tests/contracts/test_runs.py): incremental polls, a resume's
truncation read without duplicates, list_runs, damaged files skipped; plus what object storage adds:
no appends (logs are rolled segments rewritten whole), and a bounded number of requests per refresh,
counted at the server.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from skyrl_core import run_files, runs
from skyrl_core.runs import RunReader, RunWriter, list_runs, run_root_problem


def _root(s3: Any) -> str:
    return f"s3://{s3.bucket}/runs-{uuid.uuid4().hex[:8]}"


def _write_steps(writer: RunWriter, first: int, last: int) -> None:
    for step in range(first, last + 1):
        writer.log_metrics(step, {"reward/avg_raw_reward": step / 100, "timing/step": 0.1})
        writer.set_status("running", step=step)


def test_roundtrip_poll_and_parts(s3: Any) -> None:
    root = _root(s3)
    writer = RunWriter(f"{root}/a")
    assert writer.run_dir == f"{root}/a"
    writer.write_config({"trainer": {"seed": 3}})
    writer.set_status("running", step=0, total_steps=4)
    writer.log_event("started", step=0)
    reader = RunReader(f"{root}/a")
    assert reader.exists() and reader.run_id == "a" and not reader.local
    assert reader.config() == {"trainer": {"seed": 3}}
    assert reader.poll() == []
    _write_steps(writer, 1, 2)
    writer.write_trajectories(1, [{"step": 1, "prompt": "p", "response": "r", "reward": 1.0}])
    got = reader.poll()
    assert [r["step"] for r in got] == [1, 2]
    assert reader.poll() == []  # nothing new: nothing returned twice
    _write_steps(writer, 3, 3)
    assert [r["step"] for r in reader.poll()] == [3]
    assert reader.status()["step"] == 3 and reader.status()["total_steps"] == 4
    assert [e["kind"] for e in reader.poll_events()] == ["started"]
    assert reader.trajectory_steps() == [1]
    assert reader.trajectories(1)["response"].tolist() == ["r"]
    assert reader.trajectories(1, columns=["reward"]).columns.tolist() == ["reward"]
    with pytest.raises(FileNotFoundError, match="step 9: no trajectory part"):
        reader.trajectories(9)
    assert reader.last_metrics()["step"] == 3
    assert reader.warnings == []


def test_segments_roll_and_resume_truncation(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(run_files, "SEGMENT_BYTES", 400)  # a few rows per segment
    root = _root(s3)
    writer = RunWriter(f"{root}/r")
    writer.log_event("started", step=0)
    _write_steps(writer, 1, 12)
    for step in (1, 5, 9):
        writer.write_trajectories(step, [{"step": step, "reward": 0.0}])
    names = [n for n in writer.store.list() if n.startswith("metrics.")]
    assert len(names) >= 3, names  # rolled
    follower = RunReader(f"{root}/r")
    assert [r["step"] for r in follower.poll()] == list(range(1, 13))

    # a resume from step 6 (a new writer process): later rows and parts go, a new generation is written
    resumed = RunWriter(f"{root}/r")
    resumed.truncate_after(6)
    resumed.log_event("resumed", step=6)
    assert sorted(n.split("-")[0] for n in resumed.store.list() if n.startswith("metrics.")) == \
        ["metrics.0001"] * len([n for n in resumed.store.list() if n.startswith("metrics.")])
    assert resumed.store.list("trajectories").keys() == {"step_000001.parquet", "step_000005.parquet"}
    assert follower.poll() == []  # the kept rows were returned already
    _write_steps(resumed, 7, 8)
    assert [r["step"] for r in follower.poll()] == [7, 8]  # steps trained again are new rows
    assert [r["step"] for r in RunReader(f"{root}/r").metrics()] == list(range(1, 9))
    assert [e["kind"] for e in RunReader(f"{root}/r").events()] == ["started", "resumed"]


def test_damaged_status_and_lines_are_skipped(s3: Any) -> None:
    root = _root(s3)
    writer = RunWriter(f"{root}/d")
    _write_steps(writer, 1, 1)
    writer.store.put("status.json", b"\xff not json")
    writer.store.put(runs.segment_name("metrics", 0, 1), b'{"step": 2, "time": 1.0}\nnot json\n')
    reader = RunReader(f"{root}/d")
    assert reader.status()["state"] == runs.DAMAGED
    assert [r["step"] for r in reader.poll()] == [1, 2]
    assert any("status.json is not UTF-8" in w for w in reader.warnings)
    assert any("metrics.jsonl line" in w and "is not JSON" in w for w in reader.warnings)
    fresh = RunWriter(f"{root}/d")  # a writer on a damaged status starts a fresh one, with a warning
    assert fresh.warnings == ["status.json is not UTF-8 (byte 0xff at offset 0); starting a fresh status"]
    fresh.set_status("running", step=1)
    assert json.loads(fresh.store.read("status.json"))["state"] == "running"


def test_list_runs_on_s3(s3: Any) -> None:
    root = _root(s3)
    for name, reward in (("one", 0.25), ("two", 0.5)):
        w = RunWriter(f"{root}/{name}")
        w.set_status("running", step=1, total_steps=2)
        w.log_metrics(1, {"reward/avg_raw_reward": reward})
        w.set_status("succeeded", step=1)
    found = {s.run_id: s for s in list_runs(root)}
    assert found.keys() == {"one", "two"}
    assert found["two"].state == "succeeded" and found["two"].last_reward == 0.5
    assert list_runs(f"{root}/nothing-here") == []


def test_dashboard_following_1000_steps_costs_a_few_requests(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m bench s3_dashboard``'s measurement: a Dashboard following a 1,000-step S3 run, the "job" writing
    one step before each refresh: at most 3 requests (LIST, the grown segment's range, status.json) and under
    200 ms per refresh; the LIST alone when nothing changed. Requests are counted by the server."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2]))
    from bench.s3_dashboard import measure

    result = measure(s3, steps=1000, refreshes=10)
    assert result["requests_per_refresh_max"] <= 3, result
    assert result["idle_refresh_requests"] == 1, result
    # LIST, status, the metrics segments, events, and config.yaml once (the reward band's samples per step)
    assert result["open_requests"] <= 2 + result["metrics_segments"] + 1 + 1, result
    assert result["refresh_ms_median"] < 200, result


def test_a_refresh_lists_once_however_long_its_reads_take(s3: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A dashboard refresh (poll, poll_events, status) makes one LIST even where its reads outlast the
    listing's time to live (a loaded machine: the 1,000-step open above re-listed there); outside a refresh
    the time to live still holds."""
    from skyrl_nb.dashboard import Dashboard

    run_dir = f"{_root(s3)}/slow"
    writer = RunWriter(run_dir)
    writer.set_status("running", step=0, total_steps=10)
    writer.log_event("started", step=0)
    _write_steps(writer, 1, 3)
    monkeypatch.setattr(runs, "LISTING_TTL_S", 0.0)  # every read outlasts it
    dash = Dashboard(run_dir, static=True)
    lists = []
    real_list = dash.reader.store.list
    monkeypatch.setattr(dash.reader.store, "list", lambda *a, **k: lists.append(1) or real_list(*a, **k))
    dash.refresh()
    assert dash.points == 3 and dash.step == 3 and len(lists) == 1
    _write_steps(writer, 4, 4)
    dash.refresh()
    assert dash.points == 4 and dash.step == 4 and len(lists) == 2
    dash.reader.status()  # outside a refresh, no listing is held past its time to live
    assert len(lists) == 3


@pytest.mark.parametrize(("value", "expected"), [
    ("s3://bucket/prefix", None),
    ("s3://", "names no bucket"),
    ("nosuchscheme://x/y", "fsspec does not know"),
])
def test_run_root_problem_for_urls(value: str, expected: str | None) -> None:
    problem = run_root_problem(value)
    if expected is None:
        assert problem is None
    else:
        assert problem.startswith(f"run.run_root: {value!r}") and expected in problem


def test_inspector_data_follows_parts_on_s3(s3: Any) -> None:
    """The inspector's data layer on S3: one LIST per refresh finds new parts; a step opens; a full scan
    sees a resume's removals."""
    from skyrl_widgets.inspector_data import TrajectoryData

    root = _root(s3)
    writer = RunWriter(f"{root}/insp")
    rows = [{"step": 1, "uid": f"1-{i}", "group": i // 2, "prompt": f"q{i // 2}", "response": "ab",
             "reward": float(i % 2), "advantage": 0.0, "num_tokens": 2, "finish_reason": "stop"} for i in range(4)]
    writer.write_trajectories(1, rows)
    data = TrajectoryData(f"{root}/insp")
    assert data.steps == [1]
    for step in (2, 3):
        writer.write_trajectories(step, [{**r, "step": step} for r in rows])
    before = s3.total()
    assert data.refresh().added == [2, 3]
    assert s3.total() - before == 1  # one LIST (StartAfter the newest known part)
    view = data.view(3)
    assert view["samples"] == 4 and view["all_groups"] == 2
    writer.truncate_after(1)
    assert data.refresh(full=True).removed == [2, 3] and data.steps == [1]
