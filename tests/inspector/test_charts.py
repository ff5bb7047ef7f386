"""The dashboard's SVG chart widgets (skyrl_widgets.charts) as kernel objects."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

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
    assert reward["± std"]["points"][0] == [1, 1 / 3 - 0.1, 1 / 3 + 0.1]
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
