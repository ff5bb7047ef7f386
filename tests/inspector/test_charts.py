"""The dashboard's SVG chart widgets (skyrl_widgets.charts) as kernel objects."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from skyrl_nb.dashboard import RunSeries
from skyrl_widgets.charts import MAX_POINTS, MetricChart, make_charts, reward_series, update_charts

STATIC = Path(__file__).resolve().parents[2] / "widgets" / "skyrl_widgets" / "static"


def _series(steps: int) -> dict:
    s = RunSeries()
    s.add_rows([{"step": i, "time": float(i), "reward/avg_raw_reward": i / steps, "reward/std_raw_reward": 0.1,
                 "reward/avg_pass_at_4": min(1.0, i / steps + 0.2), "trainer/tokens_per_second": 100.0 + i,
                 "timing/generate": 0.3, "timing/policy_train": 0.2, **({"eval/all/avg_score": 0.5} if i == 2 else {})}
                for i in range(1, steps + 1)])
    return s.data


def test_panels_carry_every_curve_and_grow():
    charts = make_charts(_series(3))
    assert set(charts) == {"reward", "eval", "tokens", "timing"}
    reward = {s["name"]: s for s in charts["reward"].series}
    assert reward["reward mean"]["points"] == [[1, 1 / 3], [2, 2 / 3], [3, 1.0]]
    assert reward["reward mean"]["clickable"] and reward["pass@4"]["clickable"]
    assert reward["mean ± std"]["points"][0] == [1, 1 / 3 - 0.1, 1 / 3 + 0.1]
    assert charts["eval"].series[0]["points"] == [[2, 0.5]]
    assert [s["name"] for s in charts["timing"].series] == ["generate", "train"]  # parts the run reports
    assert charts["reward"].clickable and not charts["tokens"].clickable
    update_charts(charts, _series(5))
    assert len(charts["reward"].series[1]["points"]) == 5


def test_unchanged_data_sends_nothing_and_long_runs_are_thinned():
    data = _series(4)
    charts = make_charts(data)
    sent = []
    charts["reward"].observe(sent.append, "series")
    update_charts(charts, data)
    assert sent == []
    long = reward_series(_series(5000))[1]["points"]
    assert len(long) <= MAX_POINTS + 1 and long[-1][0] == 5000


def test_missing_values_are_gaps_not_points():
    data = _series(3)
    data["reward_mean"][1] = None
    data["pass_at"] = [None, None, None]
    assert [p[0] for p in reward_series(data)[1]["points"]] == [1, 3]
    assert reward_series(data)[2]["points"] == [] and reward_series(data)[2]["name"] == "pass@4"


def test_a_click_message_reaches_the_callbacks_with_the_step():
    chart = MetricChart(title="reward", clickable=True)
    got: list[int] = []
    chart.on_click(got.append)
    chart._handle_message(chart, {"event": "click", "step": 7}, [])  # what charts.js sends
    chart._handle_message(chart, {"event": "hover", "step": 8}, [])
    chart._handle_message(chart, {"event": "click", "step": "x"}, [])
    assert got == [7] and chart.selected_step == 7
    assert "reward" in repr(chart) and "MetricChart" in chart._repr_html_()
    data, _ = chart._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in data


def test_es_module_is_valid_javascript():
    text = (STATIC / "charts.js").read_text()
    assert "export default" in text and "model.send" in text
    node = shutil.which("node")
    if node:
        subprocess.run([node, "--check", str(STATIC / "charts.js")], check=True)


def test_axes_have_nice_ticks_on_the_rewards_scale():
    """The reward axis is the reward's own range (the ±std band never widens it), ticks are nice numbers inside
    it; x ticks are whole steps from the eval before training to the run's last step."""
    data = _series(3)
    data["reward_std"] = [0.6, 0.6, 0.6]  # a 0/1 reward's band runs past 0 and 1
    charts = make_charts(data, total_steps=40)
    y = charts["reward"].y_axis
    assert y["range"] == [0.0, 1.0] and [t[1] for t in y["ticks"]] == ["0", "0.25", "0.5", "0.75", "1"]
    x = charts["reward"].x_axis
    assert x["range"] == [0, 40] and all(isinstance(v, int) for v, _ in x["ticks"]) and x["label"] == "step"
    one_eval = make_charts({**data, "eval_step": [0], "eval_score": [0.4]}, total_steps=40)["eval"]
    assert one_eval.x_axis["range"] == [0, 40] and one_eval.y_axis["range"] == [0.0, 1.0]
    tokens = charts["tokens"].y_axis
    assert tokens["range"][0] == 0.0 and all(lo < hi for (lo, _), (hi, _) in zip(tokens["ticks"], tokens["ticks"][1:], strict=False))


def test_nice_ticks_and_labels():
    from skyrl_widgets.axes import step_axis, tick_label, value_axis

    assert [t[1] for t in value_axis([3000, 12882], floor=0)["ticks"]] == ["0", "5k", "10k", "15k"]
    assert [t[1] for t in value_axis([0.12, 0.69], floor=0)["ticks"]] == ["0", "0.2", "0.4", "0.6", "0.8"]
    assert [t[0] for t in step_axis(0, 190)["ticks"]] == [0, 50, 100, 150]
    assert tick_label(0.30000000000000004, 0.1) == "0.3" and tick_label(2.5, 2.5) == "2.5"
    assert value_axis([], fixed=(0.0, 1.0))["range"] == [0.0, 1.0]


def test_binary_rewards_get_a_confidence_band_that_says_so(tmp_path):
    """0/1 rewards (std = sqrt(mean (1 - mean)) at every step) with a known rollout count: the band is the 95% CI
    of the mean, inside [0, 1], and its name says so in the widget, the static SVG and via a run's config; other
    rewards, or an unknown count, keep mean ± std, named."""
    import math

    from skyrl_core.runs import RunWriter
    from skyrl_nb.dashboard import Dashboard
    from skyrl_widgets.dashboard import binary_rewards, render_svg, reward_band

    means = [0.0, 0.25, 0.5, 1.0]
    binary = {"reward_mean": means, "reward_std": [math.sqrt(m * (1 - m)) for m in means], "samples": 64}
    lo, hi, label = reward_band(binary)
    assert binary_rewards(binary) and label == "95% CI of the mean (n=64)"
    assert hi[2] - lo[2] == pytest.approx(2 * 1.96 * 0.5 / 8) and lo[0] == hi[0] == 0.0 and hi[3] == 1.0
    assert reward_band({**binary, "samples": 0})[2] == "mean ± std"  # no count: no interval to claim
    fractional = {**binary, "reward_std": [0.1, 0.2, 0.2, 0.0]}
    assert not binary_rewards(fractional) and reward_band(fractional)[2] == "mean ± std"
    assert not binary_rewards({"reward_mean": [None], "reward_std": [None]})

    writer = RunWriter(tmp_path / "binary")
    writer.write_config({"trainer": {"train_batch_size": 4}, "generator": {"n_samples_per_prompt": 8}})
    for step, m in enumerate(means, start=1):
        writer.log_metrics(step, {"reward/avg_raw_reward": m, "reward/std_raw_reward": math.sqrt(m * (1 - m))})
    writer.set_status("succeeded", step=4, total_steps=4)
    dash = Dashboard(writer.run_dir, static=True)
    dash.refresh()
    assert dash.series.data["samples"] == 32
    assert [s["name"] for s in reward_series(dash.series.data)][0] == "95% CI of the mean (n=32)"
    assert "95% CI of the mean (n=32)" in render_svg(dash.series.data)


def test_static_svgs_on_one_page_share_no_id(tmp_path):
    """Inline SVGs share the page's id space and `url(#id)` takes the first element with that id on the page:
    every id in two dashboards and a comparison rendered statically is unique, and every reference resolves
    inside its own document."""
    import re

    from inspector_runs import write_run

    from skyrl_nb.compare import compare
    from skyrl_widgets.dashboard import render_svg

    a, b = write_run(tmp_path / "a", steps=3).run_dir, write_run(tmp_path / "b", steps=5).run_dir
    docs = [render_svg(_series(3)), render_svg(_series(3)), compare([a, b]).to_svg(), compare([a, b]).to_svg()]
    ids = [i for d in docs for i in re.findall(r'\bid="([^"]+)"', d)]
    assert len(ids) >= 10 and len(ids) == len(set(ids)), ids
    for doc in docs:
        refs = re.findall(r"url\(#([^)]+)\)", doc)
        assert refs and set(refs) <= set(re.findall(r'\bid="([^"]+)"', doc))


def test_ray_job_link_says_how_to_get_a_local_clusters_token(tmp_path):
    """A job on a local cluster: the header's Ray job link (widget and static HTML) says to run
    cluster.dashboard_token(), and neither shows the token; a cluster without that method gets no hint."""
    import types

    from inspector_runs import write_run

    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.cluster.local import LocalCluster
    from skyrl_nb.dashboard import Dashboard
    from skyrl_nb.jobs import Job

    class JobsInMemory:
        def get_job_info(self, submission_id):
            return types.SimpleNamespace(status="SUCCEEDED", message="", start_time=None, end_time=None)

    run = write_run(tmp_path / "run", steps=2).run_dir
    local = LocalCluster("http://127.0.0.1:8265", "tok-SECRET", temp_dir=tmp_path, pid=0, num_cpus=1, log_path=tmp_path)
    remote = Cluster("http://10.0.0.5:8265", "tok-SECRET")
    for cluster in (local, remote):
        cluster._client_obj = JobsInMemory()
    views = {}
    for name, cluster in (("local", local), ("remote", remote)):
        dash = Dashboard(Job(cluster, submission_id="sub-1", run_id="run", run_dir=str(run)), static=False)
        dash.widget()
        views[name] = (dash._header.links, dash._html())
    (link,), static = views["local"]
    assert "cluster.dashboard_token()" in link["hint"] and "cluster.dashboard_token()" in link["title"]
    assert "cluster.dashboard_token()" in static and "tok-SECRET" not in static + repr(link)
    (link,), static = views["remote"]
    assert "hint" not in link and "dashboard_token" not in static
