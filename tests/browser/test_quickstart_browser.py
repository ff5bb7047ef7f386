"""notebooks/quickstart.ipynb run top to bottom in a real JupyterLab, in headless chromium.

The notebook starts a real local Ray head and submits the real engine job (the tiny model on
arithmetic, 150 steps as in the quickstart); its parameters cell is filled in with papermill's `parameterize_notebook`
(nothing runs outside the browser). Asserted in the browser DOM: the dashboard renders and its reward
chart gains points while the job runs; a real mouse click on a reward point, made while the job
runs, opens that step's rollouts in the inspector before the job ends; the heatmap toggle colours
tokens. Screenshots go to artifacts/browser/;
`SKYRL_NB_UPDATE_DOCS_IMG=1` also refreshes docs/img/dashboard.png and docs/img/inspector.png.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from lab_notebook import open_and_run_all, prompts

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
# the quickstart's own length: tens of seconds on 2 cores, long enough to watch the chart grow and to
# click while the job still runs (60 steps were over in 15 s, before the widget had drawn)
STEPS = 150
RUN_ID = "browser-quickstart"
REWARD_CHART = ".skyrl-chart:has(.sk-clickable)"
REWARD_POINTS = f"{REWARD_CHART} g.sk-line[data-name='reward mean'] circle.sk-point"


def _record_run_states(status_json: Path, started: float) -> list[tuple[float, str, int]]:
    """(seconds since `started`, state, step) each time the run's status changes, from a thread."""
    import threading

    seen: list[tuple[float, str, int]] = []

    def follow() -> None:
        while time.monotonic() - started < 400 and (not seen or seen[-1][1] not in ("succeeded", "failed")):
            try:
                status = json.loads(status_json.read_text())
                now = (round(time.monotonic() - started, 1), status["state"], status.get("step") or 0)
                if not seen or seen[-1][1:] != now[1:]:
                    seen.append(now)
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.5)

    threading.Thread(target=follow, daemon=True).start()
    return seen


def _parameterised_quickstart(lab) -> str:
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(ROOT / "notebooks" / "quickstart.ipynb"))  # as papermill reads it
    nb = parameterize_notebook(nb, {
        "max_training_steps": STEPS, "run_root": str(lab.root_dir / "runs"), "run_id": RUN_ID,
        "num_cpus": 2, "keep_cluster": False, "min_reward_gain": -1.0})
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (skyrl-nb .venv)", "language": "python"}
    nbformat.write(nb, lab.root_dir / "quickstart.ipynb")
    return "quickstart.ipynb"


def _status(lab) -> dict:
    try:
        return json.loads((lab.root_dir / "runs" / RUN_ID / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _reward_points(page) -> int:
    return page.locator(REWARD_POINTS).count()


def test_quickstart_live_dashboard_click_opens_step_with_heatmap(lab, page, artifacts):
    started = time.monotonic()
    timings: dict[str, float] = {}
    open_and_run_all(page, lab, _parameterised_quickstart(lab))
    run_states = _record_run_states(lab.root_dir / "runs" / RUN_ID / "status.json", started)

    # what the page shows over time, sampled by the page itself: [s, charts, reward points]
    page.evaluate(f"""() => {{ window.__rewardCounts = []; const t0 = performance.now();
        setInterval(() => {{ const n = document.querySelectorAll("{REWARD_POINTS}").length;
                             const charts = document.querySelectorAll(".skyrl-chart").length;
                             const c = window.__rewardCounts, last = c[c.length - 1];
                             if (!last || last[1] !== charts || last[2] !== n)
                                 c.push([Math.round((performance.now() - t0) / 100) / 10, charts, n]); }}, 100); }}""")

    # the dashboard renders; its reward chart gains points while the real job runs
    page.wait_for_selector(REWARD_CHART, timeout=240_000)
    timings["dashboard_s"] = time.monotonic() - started
    page.wait_for_selector(REWARD_POINTS, timeout=240_000)
    timings["first_point_s"] = time.monotonic() - started
    first = _reward_points(page)
    status = _status(lab)
    assert status.get("state") == "running" and first < STEPS, (
        f"the run was over before the page showed its first point: {first} points, status {status}, "
        f"run states [s, state, step] {run_states}, page timings {timings}, "
        f"page samples [s, charts, points] {page.evaluate('() => window.__rewardCounts')}")
    page.wait_for_function(f"() => document.querySelectorAll(\"{REWARD_POINTS}\").length > {first}", timeout=120_000)
    grown, status = _reward_points(page), _status(lab)
    assert status.get("state") == "running", f"the chart grew {first} -> {grown} points only after the run ended: {status}"
    growth = {"first_points": first, "later_points": grown, "run_step_then": status.get("step")}

    # the inspector (opened by the notebook, linked to the dashboard) follows the running job
    page.wait_for_selector(".skyrl-inspector .sk-group", timeout=60_000)
    page.locator(REWARD_CHART).evaluate("e => e.scrollIntoView({block: 'center'})")
    page.screenshot(path=str(artifacts / "quickstart_running.png"))

    # a real mouse click on the reward point of step 2, while the job still runs and the notebook's
    # last cell awaits it (`await dash.wait_async()` leaves the kernel free for widget messages)
    # The chart is redrawn on every update while the job runs, so the point's element is replaced every
    # half second: playwright's click re-finds it, waits until it is visible and stable, then clicks
    # its centre with the mouse (seen in CI: a bounding box read between two redraws came back None).
    point = page.locator(f"{REWARD_POINTS}[data-step='2']")
    point.evaluate("e => e.scrollIntoView({block: 'center'})")
    point.click(timeout=30_000)
    page.wait_for_function(
        "() => /^step 2 ·/.test(document.querySelector('.skyrl-inspector .sk-summary')?.textContent || '')",
        timeout=30_000)
    answered_at = time.time()
    inspector = page.locator(".skyrl-inspector")
    assert inspector.locator(".sk-step-input").input_value() == "2"
    assert not inspector.locator(".sk-follow").is_checked()  # the clicked step stays on screen
    assert inspector.locator(".sk-group").count() >= 1 and inspector.locator(".sk-sample").count() >= 2
    # the chart marks it (a vertical line: zero width, so "attached", not "visible")
    page.wait_for_selector(f"{REWARD_CHART} .sk-chart-selected", state="attached", timeout=10_000)

    # the job ends: every reward point is there, the notebook ran to its last cell without errors
    page.wait_for_function(f"() => document.querySelectorAll(\"{REWARD_POINTS}\").length >= {STEPS}",
                           timeout=300_000)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not all(re.search(r"\[\d+\]", p) for p in prompts(page)):
        page.wait_for_timeout(500)
    timings["run_all_s"] = time.monotonic() - started
    final = _status(lab)
    # the click was answered while the job ran, not queued behind a blocked kernel
    assert final.get("ended_at") and answered_at < final["ended_at"], (
        f"the click on step 2 was answered at {answered_at:.1f}, after the run ended at {final.get('ended_at')}")
    outputs = "\n".join(page.locator(".jp-OutputArea").all_inner_texts())
    assert all(re.search(r"\[\d+\]", p) for p in prompts(page)), f"cells still running: {prompts(page)}"
    assert "Traceback" not in outputs, outputs[-3000:]
    assert "succeeded" in outputs
    assert _reward_points(page) == STEPS
    # the inspector still shows the clicked step after the run ended
    assert re.match(r"step 2 ·", inspector.locator(".sk-summary").inner_text())

    # the heatmap toggle colours tokens by log-prob
    inspector.locator(".sk-heatmap-select").select_option("logprob")
    page.wait_for_selector(".skyrl-inspector .sk-tok", timeout=10_000)
    coloured = page.evaluate(
        """() => Array.from(document.querySelectorAll('.skyrl-inspector .sk-samples .sk-tok'))
                 .filter(t => { const c = getComputedStyle(t).backgroundColor;
                                return c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent'; }).length""")
    assert coloured > 20
    page.wait_for_timeout(300)

    dashboard = page.locator(".jp-OutputArea-output", has=page.locator(REWARD_CHART)).first
    dashboard.evaluate("e => e.scrollIntoView()")
    dashboard.screenshot(path=str(artifacts / "dashboard.png"))
    # a viewport taller than the inspector, so its screenshot is not cut by the notebook's scroll area
    page.set_viewport_size({"width": 1500, "height": 1600})
    inspector.evaluate("e => e.scrollIntoView()")
    page.wait_for_timeout(300)
    inspector.screenshot(path=str(artifacts / "inspector.png"))
    page.screenshot(path=str(artifacts / "notebook.png"), full_page=True)
    if os.environ.get("SKYRL_NB_UPDATE_DOCS_IMG") == "1":
        for name in ("dashboard.png", "inspector.png"):
            shutil.copy(artifacts / name, ROOT / "docs" / "img" / name)

    timings["total_s"] = time.monotonic() - started
    (artifacts / "quickstart_timing.json").write_text(json.dumps(
        {k: round(v, 1) for k, v in timings.items()} | growth | {"run_states_seen": run_states}))
