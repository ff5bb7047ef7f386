"""Two dashboards and a comparison on one JupyterLab page, measured on the rendered SVG in both themes.

The page: a finished 20-step run with 0/1 rewards and an eval point at step 20 (its dashboard follows a
`Job` on a `LocalCluster`), a finished 190-step run with fractional rewards, and
``skyrl_nb.compare([...])`` of the two. The run stores are written with skyrl_core's RunWriter (no
training); the Job's Jobs API client answers from memory (no Ray head: it would triple the test's time),
so the header's Logs box and "Ray job" link are the real widget drawing a real `Job`'s answers.

Measured in light, in dark, and in light again after the switch:
- every chart's data is clipped by its own frame (the `url(#id)` of its data group resolves to a clip rect
  in its own SVG, of its frame's size, and no id is on the page twice);
- every point of every series (polyline vertices, markers, band vertices, bars) lies inside its own
  chart's frame, and each curve reaches its last step (190 in the comparison, the eval point at 20);
- no chart changes size across the switches;
- the read-out names the step under the pointer at three positions, computed from the x ticks drawn;
- the 0/1 reward's band is the 95% CI of the mean and says so; the fractional one says mean ± std.
And once: the Logs box opens scrolled to its last line; the Ray job link says how to get the token.
Screenshots go to artifacts/browser/charts-*.png.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from dom_checks import set_theme
from lab_notebook import open_and_run_all

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]

NOTEBOOK = "charts_page.ipynb"
SHORT, LONG = 20, 190
SAMPLES = (4, 4)  # train_batch_size x n_samples_per_prompt: 16 rollouts per step
LOG_LINES = 200
COMPARE_CHART = ".skyrl-chart:has(.sk-series[data-name='long'])"  # the one panel with a series per run
SHORT_REWARD = ".skyrl-chart:has(.sk-series[data-name^='95% CI'])"  # the 0/1 run's dashboard reward panel

# Every reference to an id on the page (clip-path, fill, mask, marker, filter: anything written url(#id)) whose
# id is not on the page exactly once, inside the same SVG as the reference.
_BAD_REFS_JS = """() => {
  const bad = [];
  let refs = 0;
  for (const e of document.querySelectorAll("*")) {
    for (const a of e.attributes) {
      for (const m of a.value.matchAll(/url\\(#([^)]+)\\)/g)) {
        refs += 1;
        const found = document.querySelectorAll(`[id="${m[1]}"]`);
        if (found.length !== 1 || found[0].ownerSVGElement !== (e.ownerSVGElement || e.closest("svg")))
          bad.push({ attr: a.name, id: m[1], count: found.length });
      }
    }
  }
  return { refs, bad };
}"""

CELLS = [
    '''\
import types
from pathlib import Path
from skyrl_nb.cluster.local import LocalCluster
from skyrl_nb.dashboard import Dashboard
from skyrl_nb.jobs import Job

class JobsInMemory:  # the Jobs API's answers for one finished submission, without a Ray head
    def get_job_info(self, submission_id):
        return types.SimpleNamespace(status="SUCCEEDED", message="", start_time=None, end_time=None)
    def get_job_logs(self, submission_id):
        return "\\n".join(f"log line {{i}}" for i in range({lines}))

cluster = LocalCluster("http://127.0.0.1:8265", "", temp_dir=Path({tmp!r}), pid=0, num_cpus=2,
                       log_path=Path({tmp!r}))
cluster._client_obj = JobsInMemory()
job = Job(cluster, submission_id="skyrl-short-1", run_id="short", run_dir={short!r})
Dashboard(job)''',
    "Dashboard({long!r})",
    "import skyrl_nb\nskyrl_nb.compare([{short!r}, {long!r}])",
]

# Per visible chart: its frame, what its data group is clipped by, every drawn point, the x ticks, the legend.
_MEASURE_JS = """() => {
  const toScreen = (svg, x, y) => { const p = new DOMPoint(x, y).matrixTransform(svg.getScreenCTM()); return [p.x, p.y]; };
  const ids = new Map();
  for (const e of document.querySelectorAll("[id]")) ids.set(e.id, (ids.get(e.id) || 0) + 1);
  return Array.from(document.querySelectorAll(".skyrl-chart")).filter((c) => c.getClientRects().length).map((chart) => {
    const svg = chart.querySelector(".sk-chart-svg");
    const f = chart.querySelector(".sk-chart-frame").getBoundingClientRect();
    const data = chart.querySelector(".sk-chart-data");
    const ref = (data.getAttribute("clip-path") || "").match(/^url\\(#(.+)\\)$/);
    const clip = ref ? document.getElementById(ref[1]) : null;
    const r = clip?.querySelector("rect");
    let clipBox = null;
    if (r) {
      const [a, b] = [toScreen(clip.ownerSVGElement, +r.getAttribute("x"), +r.getAttribute("y")),
                      toScreen(clip.ownerSVGElement, +r.getAttribute("x") + +r.getAttribute("width"),
                               +r.getAttribute("y") + +r.getAttribute("height"))];
      clipBox = [a[0], a[1], b[0], b[1]];
    }
    const series = Array.from(chart.querySelectorAll(".sk-chart-data .sk-series")).map((g) => {
      const pts = [];
      for (const e of g.querySelectorAll("polyline, polygon"))
        for (const p of e.points) pts.push(toScreen(svg, p.x, p.y));
      for (const c of g.querySelectorAll("circle")) {
        const b = c.getBoundingClientRect();
        pts.push([b.left, b.top], [b.right, b.bottom]);
      }
      for (const q of g.querySelectorAll("rect")) {
        const b = q.getBoundingClientRect();
        pts.push([b.left, b.top], [b.right, b.bottom]);
      }
      const line = g.querySelector("polyline");
      const last = line && line.points.length ? toScreen(svg, line.points[line.points.length - 1].x, 0)[0] : null;
      const markers = Array.from(g.querySelectorAll("circle")).map((c) => c.getBoundingClientRect());
      return { name: g.dataset.name, kind: g.getAttribute("class"), points: pts, vertices: line ? line.points.length : 0,
               lastX: last ?? (markers.length ? (markers[markers.length - 1].left + markers[markers.length - 1].right) / 2 : null),
               markers: markers.length };
    });
    const ticks = Array.from(chart.querySelectorAll(".sk-x-tick")).map((t) =>
      [Number(t.dataset.value), toScreen(svg, +t.getAttribute("x"), 0)[0]]);
    return {
      id: chart.dataset.chartId, title: chart.querySelector(".sk-chart-title").textContent, subtitle: chart.querySelector(".sk-chart-subtitle").textContent,
      frame: [f.left, f.top, f.right, f.bottom], clipId: ref ? ref[1] : null, clipIdCount: ref ? ids.get(ref[1]) || 0 : 0,
      clipInOwnSvg: Boolean(clip && clip.ownerSVGElement === svg), clipBox, series, ticks,
      svgWidth: svg.getBoundingClientRect().width, plotWidth: chart.querySelector(".sk-chart-plot").getBoundingClientRect().width,
      legend: Array.from(chart.querySelectorAll(".sk-legend-item")).map((e) => e.textContent),
    };
  });
}"""


def _write_runs(root: Path) -> tuple[Path, Path]:
    """The two finished runs, as the engine would leave them."""
    from skyrl_core.runs import RunWriter

    def write(run_id: str, steps: int, binary: bool) -> Path:
        writer = RunWriter(root / run_id)
        writer.write_config({"run": {"run_id": run_id}, "trainer": {"train_batch_size": SAMPLES[0]},
                             "generator": {"n_samples_per_prompt": SAMPLES[1]}})
        writer.set_status("running", step=0, total_steps=steps)
        writer.log_event("eval", step=0, **{"eval/all/avg_score": 0.25})
        n = SAMPLES[0] * SAMPLES[1]
        for step in range(1, steps + 1):
            mean = 0.2 + 0.6 * step / steps + 0.05 * math.sin(step)
            if binary:  # k of 16 rollouts right: the std a 0/1 sample has
                mean = round(mean * n) / n
                std = math.sqrt(mean * (1 - mean))
            else:
                std = 0.12
            row = {"reward/avg_raw_reward": mean, "reward/std_raw_reward": std,
                   "reward/avg_pass_at_4": min(1.0, mean + 0.15), "trainer/tokens_per_second": 900 + 40 * math.cos(step),
                   "timing/generate": 0.3 + 0.05 * (step % 3), "timing/policy_train": 0.2}
            if step == steps and binary:
                row["eval/all/avg_score"] = 0.75
            writer.log_metrics(step, row)
        writer.set_status("succeeded", step=steps, total_steps=steps)
        return root / run_id

    return write("short", SHORT, binary=True), write("long", LONG, binary=False)


def _step_at(ticks: list[list[float]], x: float) -> float:
    (v0, x0), (v1, x1) = ticks[0], ticks[-1]
    return v0 + (x - x0) / (x1 - x0) * (v1 - v0)


def _x_of(ticks: list[list[float]], step: float) -> float:
    (v0, x0), (v1, x1) = ticks[0], ticks[-1]
    return x0 + (step - v0) / (v1 - v0) * (x1 - x0)


def _check_page(page, phase: str) -> list[dict]:
    """Every chart clipped by its own frame, every point inside it, each curve to its last step; returns the charts."""
    refs = page.evaluate(_BAD_REFS_JS)
    assert refs["refs"] >= 9 and not refs["bad"], (
        f"{phase}: of {refs['refs']} url(#id) references, ambiguous or into another SVG: {refs['bad'][:5]}")
    charts = page.evaluate(_MEASURE_JS)
    assert len(charts) >= 6, f"{phase}: {len(charts)} charts on the page: {[c['title'] for c in charts]}"
    for c in charts:
        name = f"{phase}: {c['title']!r} {c['subtitle']!r}"
        assert c["clipId"] and c["clipIdCount"] == 1 and c["clipInOwnSvg"], (name, c["clipId"], c["clipIdCount"])
        assert all(abs(a - b) <= 1.0 for a, b in zip(c["clipBox"], c["frame"], strict=True)), (name, c["clipBox"], c["frame"])
        assert abs(c["svgWidth"] - c["plotWidth"]) <= 1.0, f"{name}: SVG {c['svgWidth']} px in a {c['plotWidth']} px panel"
        left, top, right, bottom = c["frame"]
        for s in c["series"]:
            outside = [p for p in s["points"] if not (left - 0.5 <= p[0] <= right + 0.5 and top - 0.5 <= p[1] <= bottom + 0.5)]
            assert s["points"] and not outside, f"{name} / {s['name']}: {len(outside)} of {len(s['points'])} outside {c['frame']}: {outside[:3]}"
    compare = [c for c in charts if c["subtitle"] == "reward/avg_raw_reward"]
    assert len(compare) == 1, [c["subtitle"] for c in charts]
    lines = {s["name"]: s for s in compare[0]["series"]}
    assert lines["long"]["vertices"] == LONG and lines["short"]["vertices"] == SHORT, {k: v["vertices"] for k, v in lines.items()}
    for name, last in (("long", LONG), ("short", SHORT)):
        reached = _step_at(compare[0]["ticks"], lines[name]["lastX"])
        assert abs(reached - last) < 0.5, f"{phase}: compare's {name} curve ends at step {reached:.1f}, not {last}"
    evals = [c for c in charts if c["title"] == "eval score"]
    ends = sorted(round(_step_at(c["ticks"], c["series"][0]["lastX"]), 1) for c in evals)
    assert ends == [0.0, float(SHORT)], f"{phase}: the eval panels' last points sit at steps {ends}"
    return charts


def _readout(page, selector: str, steps: list[float]) -> list[tuple[float, str]]:
    """Move the pointer over the chart at each step's x (from the ticks drawn); what the read-out names there."""
    page.locator(selector).first.scroll_into_view_if_needed()
    chart_id = page.locator(selector).first.get_attribute("data-chart-id")
    chart = next(c for c in page.evaluate(_MEASURE_JS) if c["id"] == chart_id)
    got = []
    for step in steps:
        x = _x_of(chart["ticks"], step)
        y = (chart["frame"][1] + chart["frame"][3]) / 2
        page.mouse.move(x, y)
        page.wait_for_timeout(60)
        text = page.locator(f"{selector} .sk-hover-step").first.inner_text()
        got.append((round(_step_at(chart["ticks"], x), 2), text))
    page.mouse.move(0, 0)
    return got


def test_two_dashboards_and_compare_keep_every_point_in_their_own_frames(lab, page, artifacts):
    started = time.monotonic()
    short, long = _write_runs(lab.root_dir / "runs")
    fill = {"short": str(short), "long": str(long), "tmp": str(lab.root_dir / "runs"), "lines": LOG_LINES}
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": cell.format(**fill)} for cell in CELLS],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (skyrl-nb .venv)",
                                      "language": "python"}, "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (lab.root_dir / NOTEBOOK).write_text(json.dumps(nb))
    page.set_viewport_size({"width": 1500, "height": 2600})  # the whole page on screen: both dashboards and compare
    open_and_run_all(page, lab, NOTEBOOK)
    # 4 + 4 dashboard panels (the long run has no eval after step 0, but its eval panel shows step 0) + 1 compare
    page.wait_for_function("() => document.querySelectorAll('.skyrl-chart .sk-chart-frame').length >= 9", timeout=60_000)
    page.wait_for_timeout(500)
    measured: dict[str, object] = {"rendered_s": round(time.monotonic() - started, 1)}

    # the header of the job's dashboard: the Ray job link says how to get the token; Logs opens at its last line
    header = page.locator(".skyrl-run-header", has_text="short").first
    link = header.locator(".sk-link")
    assert "cluster.dashboard_token()" in (link.get_attribute("title") or ""), link.get_attribute("title")
    hint = header.locator(".sk-link-hint")
    assert hint.is_visible() and "cluster.dashboard_token()" in hint.inner_text(), hint.all_inner_texts()
    header.locator(".sk-action-logs").click()
    page.wait_for_function(f"() => /log line {LOG_LINES - 1}$/.test(document.querySelector('.sk-logs')?.textContent || '')",
                           timeout=15_000)
    page.wait_for_timeout(100)
    box = page.evaluate("() => { const l = document.querySelector('.sk-logs');"
                        " return [l.scrollTop, l.clientHeight, l.scrollHeight]; }")
    assert box[2] > box[1] and box[0] + box[1] >= box[2] - 2, f"Logs box not at its last line: scrollTop, height, scrollHeight {box}"
    measured["logs_box"] = box
    header.screenshot(path=str(artifacts / "charts-header-logs.png"))
    header.locator(".sk-action-logs").click()  # closed again: the charts keep their places for the screenshots

    # the bands say what they are: the 0/1 run's is the CI of the mean, the fractional run's mean ± std
    legends = [item for c in page.evaluate(_MEASURE_JS) for item in c["legend"]]
    n = SAMPLES[0] * SAMPLES[1]
    assert f"95% CI of the mean (n={n})" in legends and "mean ± std" in legends, legends

    sizes = None
    out = page.locator(".jp-NotebookPanel")
    for phase, theme in (("light", "JupyterLab Light"), ("dark", "JupyterLab Dark"), ("light-again", "JupyterLab Light")):
        if phase != "light":
            set_theme(page, theme)
        charts = _check_page(page, phase)
        now = [(c["title"], c["subtitle"], round(c["frame"][2] - c["frame"][0]), round(c["frame"][3] - c["frame"][1]))
               for c in charts]
        assert sizes is None or now == sizes, f"{phase}: chart sizes changed with the theme: {sizes} -> {now}"
        sizes = now
        readouts = _readout(page, COMPARE_CHART, [50.3, 117.8, 183.0]) + _readout(page, SHORT_REWARD, [3.3, 10.0, 16.7])
        for at, text in readouts:
            assert text == f"step {round(at)}", f"{phase}: pointer at step {at}, read-out {text!r}"
        measured[phase] = {"charts": len(charts), "points": sum(len(s["points"]) for c in charts for s in c["series"]),
                           "readouts": readouts}
        out.screenshot(path=str(artifacts / f"charts-{phase}.png"))
    measured["sizes"] = sizes
    measured["total_s"] = round(time.monotonic() - started, 1)
    (artifacts / "charts_browser.json").write_text(json.dumps(measured))
