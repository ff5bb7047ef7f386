"""The run store: atomic writes, incremental reads, torn lines, resume truncation."""

from __future__ import annotations

import json

import pytest

from skyrl_core.config import load_config
from skyrl_core.runs import RunReader, RunWriter, list_runs, open_run


def _rows(step, n=4):
    return [{"step": step, "uid": f"{step}-{i}", "group": i // 2, "prompt": "1+1=", "response": "2",
             "reward": float(i % 2), "advantage": 0.5, "num_tokens": 2, "finish_reason": "stop",
             "env_class": "arithmetic", "data_source": "arithmetic"} for i in range(n)]


def test_writer_reader_round_trip(tmp_path):
    w = RunWriter(tmp_path / "r1")
    w.write_config(load_config("quickstart"))
    w.set_status("running", step=0, total_steps=3)
    r = RunReader(tmp_path / "r1")
    assert r.poll() == []
    for step in (1, 2):
        w.log_metrics(step, {"reward/avg_raw_reward": step / 10, "timing/step": float("nan")})
        w.write_trajectories(step, _rows(step))
    new = r.poll()
    assert [m["step"] for m in new] == [1, 2] and new[1]["reward/avg_raw_reward"] == 0.2
    assert new[0]["timing/step"] is None  # NaN is not JSON
    assert r.poll() == []
    w.log_metrics(3, {"reward/avg_raw_reward": 0.3})
    assert [m["step"] for m in r.poll()] == [3]
    assert r.trajectory_steps() == [1, 2]
    frame = r.trajectories(2, columns=["uid", "reward", "nope"])
    assert list(frame.columns) == ["uid", "reward"] and len(frame) == 4
    assert r.config()["trainer"]["policy"]["model"]["path"] == "builtin://tiny-qwen2"
    w.set_status("succeeded", step=3)
    s = r.summary()
    assert (s.state, s.step, s.total_steps, s.last_reward) == ("succeeded", 3, 3, 0.3)
    assert "r1" in repr(r) and "succeeded" in r._repr_html_()
    assert [x.run_id for x in list_runs(tmp_path)] == ["r1"]


def test_torn_last_line_is_left_for_later(tmp_path):
    w = RunWriter(tmp_path / "r")
    w.log_metrics(1, {"a": 1})
    path = tmp_path / "r" / "metrics.jsonl"
    with path.open("a") as f:
        f.write('{"step": 2, "a"')  # a writer killed mid-line
    r = RunReader(tmp_path / "r")
    assert [m["step"] for m in r.poll()] == [1]
    with path.open("a") as f:
        f.write(': 2}\n')
    assert [m["step"] for m in r.poll()] == [2]


def test_truncate_after_for_resume(tmp_path):
    w = RunWriter(tmp_path / "r")
    r = RunReader(tmp_path / "r")
    for step in range(1, 6):
        w.log_metrics(step, {"x": step})
        w.write_trajectories(step, _rows(step))
        w.log_event("checkpoint_saved", step=step)
    assert len(r.poll()) == 5
    w.truncate_after(3)
    assert [m["step"] for m in r.metrics()] == [1, 2, 3]
    assert r.trajectory_steps() == [1, 2, 3]
    assert [e["step"] for e in r.events()] == [1, 2, 3]
    w.log_metrics(4, {"x": 4})
    # the reader notices the rewrite; the rows it kept were returned before, so only step 4 is new
    assert [m["step"] for m in r.poll()] == [4]


def test_queued_trajectories_one_in_flight_and_errors_surface(tmp_path, monkeypatch):
    """The trainer's parts go through queue_trajectories: written on the writer's thread, one at a time, each
    on disk once the next is queued or the writer is flushed; a failed write raises at the next call."""
    import threading

    import pyarrow.parquet as pq

    w = RunWriter(tmp_path / "r")
    r = RunReader(tmp_path / "r")
    writing, release = threading.Event(), threading.Event()
    real = pq.write_table

    def held(*args, **kwargs):  # the first part waits until the test lets it go
        writing.set()
        release.wait(10)
        return real(*args, **kwargs)

    monkeypatch.setattr(pq, "write_table", held)
    w.queue_trajectories(1, _rows(1))
    assert writing.wait(10) and r.trajectory_steps() == []  # in flight: the caller did not wait for it
    threading.Timer(0.2, release.set).start()
    w.queue_trajectories(2, _rows(2))  # waits for part 1 first
    assert r.trajectory_steps()[:1] == [1]
    w.flush()
    assert r.trajectory_steps() == [1, 2] and r.trajectories(2)["uid"].tolist() == [f"2-{i}" for i in range(4)]

    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pq, "write_table", broken)
    w.queue_trajectories(3, _rows(3))
    with pytest.raises(OSError, match="No space left"):
        w.flush()
    w.flush()  # reported once
    with pytest.raises(Exception, match="four"):  # rows that cannot be stored fail in the caller, at once
        w.queue_trajectories(4, [{"step": 4}, {"step": "four"}])


def test_status_step_is_rewritten_at_most_once_a_second_and_at_the_end(tmp_path):
    """A step alone rewrites status.json only when the last write is STEP_STATUS_S old; the heartbeat carries the
    latest step meanwhile, and an end writes it at once."""
    import time

    from skyrl_core.lifecycle import RunLifecycle

    def on_disk():
        return json.loads((tmp_path / "r" / "status.json").read_text())

    life = RunLifecycle(RunWriter(tmp_path / "r"), heartbeat_s=2.0)
    life.running(step=0, total_steps=10)  # other fields: written
    life.running(step=1)
    assert (on_disk()["state"], on_disk()["step"], life.step) == ("running", 0, 1)
    deadline = time.monotonic() + 10
    while on_disk()["step"] != 1 and time.monotonic() < deadline:  # the heartbeat's next beat
        time.sleep(0.05)
    assert on_disk()["step"] == 1
    life._written -= 1.0  # the last write a second ago: the next step is written by its own call
    life.running(step=2)
    assert on_disk()["step"] == 2
    life.running(step=3)
    life.succeeded()
    life.close()
    assert (on_disk()["state"], on_disk()["step"]) == ("succeeded", 3)


def test_open_run_errors_and_status_validation(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        open_run(tmp_path / "missing")
    w = RunWriter(tmp_path / "r")
    with pytest.raises(ValueError, match="allowed: pending"):
        w.set_status("exploded")
    w.set_status("failed", error="Traceback...\nValueError: boom")
    status = json.loads((tmp_path / "r" / "status.json").read_text())
    assert status["state"] == "failed" and status["ended_at"] is not None
    assert "boom" in open_run(tmp_path / "r").summary()._repr_html_()


def test_poll_after_a_resume_returns_no_row_twice(tmp_path):
    """Rows a resume kept were returned before; rows it writes for steps trained again are new data."""
    w = RunWriter(tmp_path / "r")
    r = RunReader(tmp_path / "r")
    for step in range(1, 6):
        w.log_metrics(step, {"x": step})
        w.log_event("checkpoint_saved", step=step)
    assert [m["step"] for m in r.poll()] == [1, 2, 3, 4, 5] and len(r.poll_events()) == 5
    w.truncate_after(3)
    assert r.poll() == [] and r.poll_events() == []
    w.log_metrics(4, {"x": 40})
    w.log_metrics(5, {"x": 50})
    assert [(m["step"], m["x"]) for m in r.poll()] == [(4, 40), (5, 50)]
    # a resume the reader did not see happen: truncated and appended to before the next poll
    w.truncate_after(4)
    w.log_metrics(5, {"x": 500})
    assert [(m["step"], m["x"]) for m in r.poll()] == [(5, 500)]
    assert [(m["step"], m["x"]) for m in RunReader(tmp_path / "r").metrics()] == [(1, 1), (2, 2), (3, 3), (4, 40),
                                                                                    (5, 500)]
