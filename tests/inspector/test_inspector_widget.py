"""TrajectoryInspector as a kernel object: finished runs from disk, running jobs, messages, links."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from inspector_runs import write_run, write_step

from skyrl_core.runs import RunReader
from skyrl_widgets.inspector import TrajectoryInspector, run_reader

STATIC = Path(__file__).resolve().parents[2] / "widgets" / "skyrl_widgets" / "static"


def test_opens_a_finished_run_at_its_newest_step(finished_run):
    insp = TrajectoryInspector(finished_run)
    assert insp.state == "succeeded" and insp.steps == [1, 2, 3, 4, 5] and insp.step == 5
    assert insp.view["step"] == 5 and len(insp.view["groups"]) == 3
    assert insp.has_token_data and insp._thread is None  # finished: no refresh thread
    assert "finished" in repr(insp) and "5 parts" in repr(insp)
    assert "Trajectories" in insp._repr_html_()
    assert insp.static  # no widget front end here (plain pytest): a static line only
    data, _ = insp._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" not in data and "Trajectories" in data["text/html"]
    data, _ = TrajectoryInspector(finished_run, static=False)._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data and "text/html" in data
    assert len(insp.frame(2)) == 12


def test_step_filters_and_pages_follow_the_browser(finished_run):
    insp = TrajectoryInspector(finished_run, page_size=2)
    assert insp.view["pages"] == 2
    insp.page = 1
    assert [g["key"] for g in insp.view["groups"]] == [2]
    insp.show_step(2)  # what the dashboard calls
    assert (insp.step, insp.follow, insp.page, insp.view["step"]) == (2, False, 0, 2)
    insp.filters = {**insp.filters, "zero_variance": "hide"}  # as the browser sets it
    assert [g["key"] for g in insp.view["groups"]] == [1, 2]
    insp.set_filters(search="answer 2.2.")
    assert [g["key"] for g in insp.view["groups"]] == [2]
    with pytest.raises(ValueError, match="unknown"):
        insp.set_filters(colour="red")


def test_messages_from_the_browser(finished_run):
    insp = TrajectoryInspector(finished_run)
    prompt = insp.view["groups"][1]["prompt"]
    insp._on_message(insp, {"type": "drift", "prompt": prompt}, [])
    assert insp.drift_view["prompt"] == prompt and insp.drift_view["done"]
    assert all(p[0] in insp.steps for p in insp.drift_view["points"])
    insp._on_message(insp, {"type": "drift_more"}, [])
    insp._on_message(insp, {"type": "drift_close"}, [])
    assert insp.drift_view == {}
    insp._on_message(insp, {"type": "refresh"}, [])
    assert insp.error == ""


def test_running_job_is_followed_incrementally(tmp_path):
    writer = write_run(tmp_path / "live", steps=2, state="running")
    insp = TrajectoryInspector(RunReader(writer.run_dir), auto_refresh=0)
    assert insp.state == "running" and insp.step == 2
    write_step(writer, 3)
    t = time.perf_counter()
    assert insp.refresh() == [3]
    assert (time.perf_counter() - t) < 0.5
    assert insp.step == 3 and insp.view["step"] == 3 and insp.steps[-1] == 3
    insp.show_step(1)  # the user looks back: new steps no longer move the view
    write_step(writer, 4)
    assert insp.refresh() == [4] and insp.step == 1 and insp.steps[-1] == 4
    writer.set_status("succeeded", step=4)
    assert insp.refresh() == [] and insp.state == "succeeded"


def test_auto_refresh_thread_picks_up_parts_and_stops(tmp_path):
    writer = write_run(tmp_path / "live", steps=1, state="running")
    insp = TrajectoryInspector(writer.run_dir, auto_refresh=0.05)
    try:
        write_step(writer, 2)
        deadline = time.time() + 20  # generous: the machine is shared and often busy
        while insp.step != 2 and time.time() < deadline:
            time.sleep(0.02)
        assert insp.step == 2 and insp.view["step"] == 2
        write_step(writer, 3)
        writer.set_status("succeeded", step=3)
        insp._thread.join(timeout=20)
        assert not insp._thread.is_alive() and insp.step == 3 and insp.state == "succeeded"
    finally:
        insp.close()


def test_empty_run_then_first_part(tmp_path):
    from skyrl_core.runs import RunWriter

    writer = RunWriter(tmp_path / "new")
    writer.set_status("pending")
    insp = TrajectoryInspector(writer.run_dir, auto_refresh=0)
    assert insp.steps == [] and insp.view["groups"] == [] and not insp.has_token_data
    write_step(writer, 1)
    assert insp.refresh() == [1] and insp.view["step"] == 1 and insp.has_token_data


def test_link_to_a_dashboard_and_run_arguments(finished_run):
    class FakeDashboard:
        def __init__(self):
            self.callbacks = []

        def on_step_click(self, cb):
            self.callbacks.append(cb)

    dash = FakeDashboard()
    insp = TrajectoryInspector(finished_run).link(dash)
    dash.callbacks[0](3)
    assert insp.step == 3 and insp.view["step"] == 3

    class FakeJob:
        run_dir = finished_run

    assert run_reader(FakeJob()).run_dir == finished_run
    assert run_reader(str(finished_run)).run_dir == finished_run
    with pytest.raises(TypeError, match="run directory"):
        run_reader(42)


def test_dashboard_click_opens_the_step(finished_run):
    """The real Dashboard: its click handler hands the step to the inspector."""
    dashboard = pytest.importorskip("skyrl_nb.dashboard")
    dash = dashboard.Dashboard(finished_run, static=False)
    insp = TrajectoryInspector(finished_run).link(dash)
    dash.widget()
    dash.refresh()
    for cb in dash._callbacks:
        cb(2)
    assert insp.step == 2 and insp.view["step"] == 2


def test_static_files_are_valid(tmp_path):
    """Each view's module as anywidget gets it (dom.js + the view's file) parses as one ES module (a helper
    declared twice would be a SyntaxError), and the widget classes send those texts. Under 1 s here."""
    import shutil
    import subprocess

    from skyrl_widgets._static import css, esm
    from skyrl_widgets.eval_view import EvalPromptView
    from skyrl_widgets.playground import PlaygroundView
    from skyrl_widgets.run_header import RunHeader

    js = (STATIC / "inspector.js").read_text()
    assert "export default" in js and "render" in js
    assert ".skyrl-inspector" in (STATIC / "inspector.css").read_text()
    views = {"inspector": TrajectoryInspector, "eval_view": EvalPromptView, "playground": PlaygroundView,
             "run_header": RunHeader}
    for name, cls in views.items():
        assert str(cls._esm) == esm(name) and "function h(" in esm(name)
        assert "function h(" not in (STATIC / f"{name}.js").read_text()  # one copy: dom.js's
    for name in ("inspector", "eval_view", "playground"):
        assert str(views[name]._css) == css(name) and "--sk-muted-bg:" in css(name)
    node = shutil.which("node")
    if node:  # a syntax error would only show in the browser otherwise
        for name in views:
            module = tmp_path / f"{name}.mjs"
            module.write_text(esm(name))
            subprocess.run([node, "--check", str(module)], check=True)


def test_step_ranges_stay_compact(tmp_path):
    from skyrl_widgets.inspector import _extend_ranges, _ranges

    assert _ranges([1, 2, 3, 7, 8, 10]) == [[1, 3], [7, 8], [10, 10]]
    assert _extend_ranges([[1, 3]], [4, 5, 9]) == [[1, 5], [9, 9]]
    writer = write_run(tmp_path / "r", steps=3, state="running")
    insp = TrajectoryInspector(writer.run_dir, auto_refresh=0)
    write_step(writer, 4)
    write_step(writer, 6)  # a gap: the engine skipped a step; the cheap probe stops at step 5
    insp.refresh()
    assert insp.steps[:4] == [1, 2, 3, 4]
    writer.set_status("succeeded", step=6)  # a state change lists the folder
    insp.refresh()
    assert insp.step_ranges == [[1, 4], [6, 6]] and insp.steps == [1, 2, 3, 4, 6] and insp.step == 6


def test_job_inspect_and_magic_path(finished_run):
    """`job.inspect()` and `%skyrl inspect RUN` go through skyrl_nb.dashboard.open_inspector."""
    dashboard = pytest.importorskip("skyrl_nb.dashboard")
    insp = dashboard.open_inspector(RunReader(finished_run))
    assert isinstance(insp, TrajectoryInspector) and insp.step == 5
