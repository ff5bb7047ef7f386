"""The dashboard on a run store written by RunWriter: series, static SVG, widget, clicks, detection."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Any

import pytest


def write_run(run_dir: Path, steps: int, *, state: str = "succeeded", wait_s: bool = False) -> Any:
    from skyrl_core.runs import RunWriter

    w = RunWriter(run_dir)
    w.set_status("running", step=0, total_steps=steps)
    w.log_event("eval", step=0, **{"eval/all/avg_score": 0.2})
    for step in range(1, steps + 1):
        reward = 0.3 + 0.6 * (1 - math.exp(-step / 10))
        w.log_metrics(step, {
            "reward/avg_raw_reward": reward, "reward/std_raw_reward": 0.15, "reward/avg_pass_at_8": reward + 0.1,
            "trainer/tokens_per_second": 900 + step, "timing/generate": 0.05, "timing/policy_train": 0.04,
            "timing/sync_weights": 0.01, "timing/save_checkpoints": 0.2 if step % 10 == 0 else 0.0,
            **({"timing/wait_for_batch": 0.01} if wait_s else {}),
            **({"eval/all/avg_score": reward} if step % 10 == 0 else {}),
        })
    w.set_status(state, step=steps, **({"error": "RuntimeError: boom\nat step 3"} if state == "failed" else {}))
    return w


def test_static_dashboard_of_a_finished_run(tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard

    write_run(tmp_path / "r1", 40, wait_s=True)
    dash = Dashboard(tmp_path / "r1", static=True)
    dash.refresh()
    assert dash.points == 40 and dash.state == "succeeded" and dash.finished
    data = dash.series.data
    assert data["pass_n"] == 8 and data["eval_step"] == [0, 10, 20, 30, 40]
    assert data["timing"]["wait_for_batch"][0] == 0.01
    bundle = dash._repr_mimebundle_()
    assert set(bundle) == {"text/html", "text/plain"}
    assert "<svg" in bundle["text/html"] and "wait for batch" in bundle["text/html"]
    assert len(bundle["text/html"]) < 60_000
    assert "r1: succeeded, step 40/40, reward" in bundle["text/plain"]


def test_failed_run_shows_last_error(tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard

    write_run(tmp_path / "bad", 3, state="failed")
    dash = Dashboard(tmp_path / "bad", static=False)
    dash.widget()
    dash.refresh()
    assert dash.state == "failed"
    assert dash._header.state == "failed" and dash._header.error == "at step 3"
    assert "at step 3" in dash._html() and "--jp-error-color1" in dash._html()  # the theme's error colour
    assert dash._header.actions == []  # a run directory: no job to stop or resume


def test_widget_gets_points_and_progress(tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard

    write_run(tmp_path / "r", 12)
    dash = Dashboard(tmp_path / "r", static=False)
    box = dash.widget()
    dash.refresh()
    reward = {s["name"]: s for s in dash._charts["reward"].series}
    assert [p[0] for p in reward["reward mean"]["points"]] == list(range(1, 13))
    assert [p[0] for p in dash._charts["eval"].series[0]["points"]] == [0, 10]
    timing = [s["name"] for s in dash._charts["timing"].series]
    assert "generate" in timing and "wait for batch" not in timing  # the run reports no wait_for_batch
    assert dash._header.step == 12 and dash._header.total_steps == 12 and dash._header.state == "succeeded"
    assert dash._header.times.startswith("took ") and dash._header.reward.startswith("reward 0.")
    # nice ticks on the reward's own scale; x ticks by step from the eval before training to the last step
    assert dash._charts["reward"].y_axis["ticks"] == [[0.0, "0"], [0.25, "0.25"], [0.5, "0.5"], [0.75, "0.75"],
                                                      [1.0, "1"]]
    assert dash._charts["reward"].x_axis["range"] == [0, 12] and dash._charts["reward"].x_axis["label"] == "step"
    assert box is dash.widget()


def _running(run_dir: Path, total_steps: int) -> tuple[Any, Any]:
    """A run that has started and written no step yet, and a live dashboard of it, refreshed once."""
    from skyrl_core.runs import RunWriter
    from skyrl_nb.dashboard import Dashboard

    w = RunWriter(run_dir)
    w.set_status("running", step=0, total_steps=total_steps)
    dash = Dashboard(run_dir, static=False)
    dash.widget()
    dash.refresh()
    return w, dash


def test_empty_panels_and_idle_parts_are_hidden(tmp_path: Path) -> None:
    """Before step 1 every panel is hidden; a synchronous run's wait_for_* parts (always 0) never show."""
    w, dash = _running(tmp_path / "sync", 4)
    assert all(chart.layout.display == "none" for chart in dash._charts.values())
    w.log_metrics(1, {"reward/avg_raw_reward": 0.5, "timing/generate": 0.2, "timing/policy_train": 0.1,
                      "timing/wait_for_batch": 0.0, "timing/wait_for_policy": 0.0})
    dash.refresh()
    assert [s["name"] for s in dash._charts["timing"].series] == ["generate", "train"]
    shown = {key for key, chart in dash._charts.items() if chart.layout.display != "none"}
    assert shown == {"reward", "timing"}  # no eval and no tokens/s in this run


def test_stage_before_step_one_and_times(tmp_path: Path) -> None:
    """The engine's stage events show until this attempt's first step lands."""
    w, dash = _running(tmp_path / "st", 3)
    assert dash.stage() is None and dash._header.stage == ""  # a run directory: nothing said yet
    w.log_event("stage", step=0, stage="model_load")
    dash.refresh()
    assert dash.stage()[0] == "model load" and dash._header.stage.startswith("model load · ")
    assert "(model load)" in dash.header()
    w.log_event("stage", step=0, stage="first_rollout")
    dash.refresh()
    assert dash._header.stage.startswith("first rollout")
    time.sleep(0.01)
    w.log_metrics(1, {"reward/avg_raw_reward": 0.5})
    dash.refresh()
    assert dash.stage() is None and dash._header.stage == ""
    assert dash._header.times.startswith("elapsed ")


def test_on_step_click_gets_the_step(tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard

    write_run(tmp_path / "r", 5)
    dash = Dashboard(tmp_path / "r", static=False)
    clicked: list[int] = []
    dash.on_step_click(clicked.append)
    dash.widget()
    dash.refresh()
    chart = dash._charts["reward"]
    # What the reward chart's front end (skyrl_widgets/static/charts.js) sends when a point is clicked.
    chart._handle_message(chart, {"event": "click", "step": 3}, [])
    assert clicked == [3]
    late: list[int] = []
    dash.on_step_click(late.append)  # registered after the widget exists
    chart._handle_message(chart, {"event": "click", "step": 5}, [])
    assert clicked == [3, 5] and late == [5] and chart.selected_step == 5


def test_follow_thread_sees_rows_as_they_come(tmp_path: Path) -> None:
    from skyrl_core.runs import RunWriter
    from skyrl_nb.dashboard import Dashboard

    w = RunWriter(tmp_path / "live")
    w.set_status("running", step=0, total_steps=6)
    dash = Dashboard(tmp_path / "live", static=True, poll_s=0.5).start()
    seen = []

    def writer() -> None:
        for step in range(1, 7):
            w.log_metrics(step, {"reward/avg_raw_reward": step / 10})
            w.set_status(step=step)
            time.sleep(0.3)
        w.set_status("succeeded")

    t = threading.Thread(target=writer)
    t.start()
    deadline = time.time() + 20
    while not dash.finished and time.time() < deadline:
        seen.append(dash.points)
        time.sleep(0.2)
    t.join()
    assert dash.wait(timeout=10) == "succeeded"
    assert dash.points == 6
    assert any(0 < p < 6 for p in seen), f"never saw a partial curve: {seen}"


def test_resumed_rows_replace_later_steps() -> None:
    from skyrl_nb.dashboard import RunSeries

    s = RunSeries()
    s.add_rows([{"step": i, "reward/avg_raw_reward": 0.1 * i} for i in range(1, 6)])
    s.add_rows([{"step": 4, "reward/avg_raw_reward": 0.9}, {"step": 5, "reward/avg_raw_reward": 1.0}])
    assert s.data["step"] == [1, 2, 3, 4, 5] and s.data["reward_mean"][3] == 0.9


def test_widget_frontend_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_core.frontend import widget_frontend
    from skyrl_nb import dashboard

    assert dashboard.widget_frontend is widget_frontend  # one detection, for the dashboard and the inspector
    monkeypatch.setenv("SKYRL_NB_STATIC", "1")
    assert widget_frontend() is False
    monkeypatch.setenv("SKYRL_NB_STATIC", "0")
    assert widget_frontend() is True
    monkeypatch.delenv("SKYRL_NB_STATIC")
    assert widget_frontend() is False  # no kernel in pytest


def test_eta_and_format() -> None:
    from skyrl_widgets.dashboard import format_seconds

    assert format_seconds(5) == "5s" and format_seconds(75) == "1m15s" and format_seconds(3700) == "1h01m"


class _StubJob:
    """What a Dashboard asks of a Job, answered from a run directory (Ray's part played by `ray_state`)."""

    def __init__(self, run_dir: Path, submission_id: str) -> None:
        self.run_dir, self.submission_id, self.ray_state = str(run_dir), submission_id, "running"
        self.cluster = type("C", (), {"dashboard_url": "http://127.0.0.1:8265/", "name": "stub"})()
        self._info = None
        self.calls: list[str] = []

    def status_detail(self) -> tuple[str, None]:
        return self.ray_state, None

    def owns_status(self, status: dict) -> bool:
        return True

    def stop(self) -> bool:
        self.calls.append("stop")
        from skyrl_core.runs import RunWriter

        RunWriter(self.run_dir).set_status("stopped")
        self.ray_state = "stopped"
        return True

    def wait(self, timeout: float | None = None, poll_s: float = 1.0) -> str:
        return self.ray_state

    def resume(self) -> Any:
        self.calls.append("resume")
        return _StubJob(Path(self.run_dir), f"{self.submission_id}-r1")

    def logs(self, tail: int | None = None) -> str:
        return "step 1 reward 0.5"


def test_stop_resume_and_logs_buttons(tmp_path: Path) -> None:
    """The header's buttons reach the job; the dashboard then follows the resumed submission."""
    from skyrl_core.runs import RunWriter
    from skyrl_nb.dashboard import Dashboard

    RunWriter(tmp_path / "job").set_status("running", step=0, total_steps=5)
    job = _StubJob(tmp_path / "job", "job")
    dash = Dashboard(job, static=False)  # type: ignore[arg-type]
    header = dash.widget().children[0]
    dash.refresh()
    assert header.actions == ["stop", "logs"] and header.links[0]["href"] == "http://127.0.0.1:8265/#/jobs/job"
    header._handle_message(header, {"action": "stop"}, [])  # what run_header.js sends on a click
    dash.refresh()
    assert job.calls == ["stop"] and dash.state == "stopped" and header.actions == ["resume", "logs"]
    header._handle_message(header, {"action": "resume"}, [])
    assert job.calls == ["stop", "resume"] and dash.job.submission_id == "job-r1"
    assert header.links[0]["href"].endswith("/jobs/job-r1")
    header.logs_open = True
    header._handle_message(header, {"action": "logs"}, [])
    assert header.logs == "step 1 reward 0.5"
    dash.stop()


def test_a_jobs_display_is_the_dashboards_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a widget front end a Job shows the dashboard's header as read now, saying when."""
    from skyrl_core.runs import RunWriter
    from skyrl_nb.dashboard import job_display

    RunWriter(tmp_path / "j").set_status("running", step=2, total_steps=5)
    bundle = job_display(_StubJob(tmp_path / "j", "j"))
    assert set(bundle) == {"text/html", "text/plain"} and "(as of " in bundle["text/html"]
    assert "running" in bundle["text/html"] and "<code>j</code>" in bundle["text/html"]
    assert bundle["text/plain"].startswith("j: running, step 2/5")
