"""notebooks/quickstart.ipynb run top to bottom in a real JupyterLab, in headless chromium, in both themes.

The notebook starts a real local Ray head and submits the real engine job (the tiny model on
arithmetic, 150 steps); its parameters cell is filled in with papermill's `parameterize_notebook`
(nothing runs outside the browser), and two cells are added at its end: a second job (`browser-stop`)
with its own dashboard, for the Stop and Resume buttons. Asserted in the browser DOM:

- the cluster cell shows the stages of the Ray head's cold start; before step 1 the dashboard's header
  names the stage the job is in (the engine's stage events);
- the reward chart gains points while the job runs; a real mouse click on a reward point, made while
  the job runs, opens that step's rollouts in the inspector before the job ends;
- the inspector: all n samples of a group on screen (wrapped, not cut off), the prompt as chat turns
  (raw with the template's markup on a toggle), the expected answer beside the reward, the heatmap
  colouring every token of a completion;
- the Job's display (the launch cell's output) says `succeeded` once the job has ended;
- the Stop button stops a running job (`stopped` in its status.json within 10 s), Resume resubmits it;
- in the light and the dark theme: every chart shape inside its plot frame, chart titles and legends at
  a contrast of at least 4.5:1 against what is behind them, the reward axis' ticks within the task's
  reward range [0, 1], a read-out under the pointer, and text of at least 11 px at 900 and 1400 px wide.

Screenshots go to artifacts/browser/; `SKYRL_NB_UPDATE_DOCS_IMG=1` also copies them into docs/img/
(dashboard.png, dashboard-dark.png, dashboard-900.png, inspector.png, inspector-dark.png).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from dom_checks import contrast, fonts, set_theme, shapes, y_ticks
from lab_notebook import open_and_run_all, prompts

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
# the quickstart's own length: tens of seconds on 2 cores, long enough to watch the chart grow and to
# click while the job still runs (60 steps were over in 15 s, before the widget had drawn)
STEPS = 150
RUN_ID = "browser-quickstart"
STOP_RUN_ID = "browser-stop"
REWARD_CHART = ".skyrl-chart:has(.sk-clickable)"
REWARD_POINTS = f"{REWARD_CHART} g.sk-line[data-name='reward mean'] circle.sk-point"
# the dashboard's header (a Job's display is the same header, compact: no charts)
HEADER = ".skyrl-run-header:not(.sk-compact)"
# what the added cell runs once the quickstart is done: a long job, shown by its (live) Job display, whose
# buttons stop, resume and stop it again. It saves a checkpoint every 20 steps: a run with steps and no
# checkpoint offers a new run instead of Resume (a resume would start over and overwrite its history)
STOP_CELLS = [
    f"stop_job = cluster.launch(preset, overrides=['trainer.max_training_steps=2000', f'run.run_root={{run_root}}',\n"
    f"    'trainer.eval_before_train=false', 'trainer.eval_interval=0', 'trainer.ckpt_interval=20'], run_id={STOP_RUN_ID!r})\n"
    "stop_job",
]
# the stop job's header, found by its run id, for scripts run in the page
STOP_HEADER_JS = (f"Array.from(document.querySelectorAll('.skyrl-run-header'))"
                  f".find(h => h.textContent.includes('{STOP_RUN_ID}'))")
DOCS_IMG = ("dashboard.png", "dashboard-dark.png", "dashboard-900.png", "inspector.png", "inspector-dark.png")


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
        "num_cpus": 2, "keep_cluster": True, "min_reward_gain": -1.0})  # the lab fixture stops the head
    nb.cells.extend(nbformat.v4.new_code_cell(source) for source in STOP_CELLS)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (skyrl-nb .venv)", "language": "python"}
    nbformat.write(nb, lab.root_dir / "quickstart.ipynb")
    return "quickstart.ipynb"


def _status(lab, run_id: str = RUN_ID) -> dict:
    try:
        return json.loads((lab.root_dir / "runs" / run_id / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _wait_status(lab, run_id: str, state: str, timeout: float) -> float:
    """Seconds until the run's status.json says ``state``; fails after ``timeout``."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if _status(lab, run_id).get("state") == state:
            return time.monotonic() - started
        time.sleep(0.1)
    raise AssertionError(f"{run_id} not {state} within {timeout} s: {_status(lab, run_id)}")


def _check_charts(page, theme: str) -> dict:
    """Shapes inside frames, title / legend contrast, reward ticks in [0, 1]; returns what was measured."""
    outside = [s for s in shapes(page) if not s["inside"]]
    assert not outside, f"{theme}: chart shapes outside their frames: {outside[:5]}"
    texts = contrast(page, ".skyrl-chart .sk-chart-title, .skyrl-chart .sk-legend-item, .skyrl-run-header .sk-chip, "
                           ".skyrl-run-header .sk-steps, .skyrl-chart .sk-chart-hover")
    low = [t for t in texts if t["ratio"] < 4.5]
    assert texts and not low, f"{theme}: text under 4.5:1 against its background: {low}"
    ticks = y_ticks(page, REWARD_CHART)
    assert ticks and all(0.0 <= t["value"] <= 1.0 for t in ticks), f"{theme}: reward ticks {ticks}"
    return {"shapes": len(shapes(page)), "texts": len(texts), "min_contrast": min(t["ratio"] for t in texts),
            "reward_ticks": [t["label"] for t in ticks]}


def _hover(page) -> str:
    """Move the mouse over the reward chart; return the read-out it shows."""
    svg = page.locator(f"{REWARD_CHART} .sk-chart-svg").first
    svg.scroll_into_view_if_needed()
    box = svg.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.4)
    hover = page.locator(f"{REWARD_CHART} .sk-chart-hover")
    hover.wait_for(state="visible", timeout=5_000)
    return hover.inner_text()


def _reward_points(page) -> int:
    return page.locator(REWARD_POINTS).count()


def test_quickstart_live_dashboard_click_opens_step_with_heatmap(lab, page, artifacts):
    started = time.monotonic()
    timings: dict[str, float] = {}
    open_and_run_all(page, lab, _parameterised_quickstart(lab))
    run_states = _record_run_states(lab.root_dir / "runs" / RUN_ID / "status.json", started)

    # what the page shows over time, sampled by the page itself: [s, charts, reward points], and each stage
    # the dashboard's header names with the reward points there were then
    page.evaluate(f"""() => {{ window.__rewardCounts = []; window.__stages = []; const t0 = performance.now();
        setInterval(() => {{ const n = document.querySelectorAll("{REWARD_POINTS}").length;
                             const charts = document.querySelectorAll(".skyrl-chart").length;
                             const c = window.__rewardCounts, last = c[c.length - 1];
                             if (!last || last[1] !== charts || last[2] !== n)
                                 c.push([Math.round((performance.now() - t0) / 100) / 10, charts, n]);
                             const stage = document.querySelector("{HEADER} .sk-stage")?.textContent;
                             const s = window.__stages, prev = s[s.length - 1];
                             if (stage && (!prev || prev[0] !== stage.split(" · ")[0])) s.push([stage.split(" · ")[0], n]); }}, 100); }}""")

    # the cluster cell narrated the cold start of its Ray head (a small widget): stages with their times
    started_head = page.locator(".jp-OutputArea-output", has_text="local Ray head").first
    started_head.wait_for(timeout=120_000)
    page.wait_for_function("() => /local Ray head up/.test(document.body.innerText)", timeout=120_000)
    head_text = started_head.inner_text()
    assert "raylet up" in head_text and "Jobs API answering" in head_text and "ready at" in head_text, head_text
    # the dashboard renders; its reward chart gains points while the real job runs
    page.wait_for_selector(REWARD_CHART, timeout=240_000)
    timings["dashboard_s"] = time.monotonic() - started
    page.wait_for_selector(REWARD_POINTS, timeout=240_000)
    timings["first_point_s"] = time.monotonic() - started
    stages = page.evaluate("() => window.__stages")
    before_step_1 = [name for name, points in stages if points == 0]
    assert set(before_step_1) & {"submitted", "environment", "model load", "first eval", "first rollout"}, (
        f"the header named no stage before step 1: {stages}")
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
    # both, not the summary alone: while the run is at step 2 the inspector, following the newest step, already
    # reads "step 2" before the click's answer arrives (seen in CI: the summary matched, the box was still checked)
    page.wait_for_function(
        "() => /^step 2 ·/.test(document.querySelector('.skyrl-inspector .sk-summary')?.textContent || '')"
        " && document.querySelector('.skyrl-inspector .sk-follow')?.checked === false",
        timeout=30_000)
    answered_at = time.time()
    inspector = page.locator(".skyrl-inspector")
    assert inspector.locator(".sk-step-input").input_value() == "2"
    assert not inspector.locator(".sk-follow").is_checked()  # the clicked step stays on screen
    assert inspector.locator(".sk-group").count() >= 1 and inspector.locator(".sk-sample").count() >= 2
    # the chart marks it (a vertical line: zero width, so "attached", not "visible")
    page.wait_for_selector(f"{REWARD_CHART} .sk-chart-selected", state="attached", timeout=10_000)
    # every sample of a group is on screen (the quickstart's 8 wrap onto rows inside the inspector), the prompt
    # reads as chat turns (the tiny model's <|user|> template), the expected answer is beside the reward
    group = inspector.locator(".sk-group").first
    cards = group.locator(".sk-sample")
    assert cards.count() == 8
    frame = inspector.bounding_box()
    for i in range(cards.count()):
        card = cards.nth(i).bounding_box()
        assert frame["x"] <= card["x"] and card["x"] + card["width"] <= frame["x"] + frame["width"] + 0.5, (i, card, frame)
    roles = group.locator(".sk-prompt .sk-role").all_inner_texts()
    assert [r.lower() for r in roles] == ["user", "assistant"], roles
    truth = group.locator(".sk-truth").inner_text()
    assert re.fullmatch(r"expected \d", truth), truth
    group.locator(".sk-raw-toggle").click()
    assert "<|user|>" in group.locator(".sk-prompt .sk-special").first.inner_text()
    group.locator(".sk-raw-toggle").click()
    assert group.locator(".sk-prompt .sk-turn").count() == 2

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

    # the Job's display (the launch cell's output) followed the job to its end, as the dashboard did
    job_view = page.locator(".skyrl-run-header.sk-compact").first
    page.wait_for_function("() => document.querySelector('.skyrl-run-header.sk-compact .sk-chip')?.textContent"
                           " === 'succeeded'", timeout=15_000)
    assert RUN_ID in job_view.inner_text()

    # the heatmap toggle colours every token of every completion by log-prob
    inspector.locator(".sk-heatmap-select").select_option("logprob")
    page.wait_for_selector(".skyrl-inspector .sk-tok", timeout=10_000)
    tokens = page.evaluate(
        """() => Array.from(document.querySelectorAll('.skyrl-inspector .sk-samples .sk-tok')).map(t => {
                 const c = getComputedStyle(t).backgroundColor; return c !== 'rgba(0, 0, 0, 0)' && c !== 'transparent'; })""")
    assert len(tokens) > 20 and all(tokens), f"{sum(tokens)} of {len(tokens)} tokens coloured"
    page.wait_for_timeout(300)

    # Stop stops a running job within 10 s; Resume resubmits it; Stop again
    stop_header = page.locator(".skyrl-run-header", has_text=STOP_RUN_ID)
    stop_header.wait_for(timeout=60_000)
    stop_header.scroll_into_view_if_needed()
    stop_state = f"() => {STOP_HEADER_JS}?.querySelector('.sk-chip')?.textContent === "
    page.wait_for_function(stop_state + "'running'", timeout=120_000)
    latest = lab.root_dir / "runs" / STOP_RUN_ID / "checkpoints" / "latest_ckpt_global_step.txt"
    deadline = time.monotonic() + 120
    while not latest.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert latest.exists(), f"{STOP_RUN_ID} saved no checkpoint in 120 s: {_status(lab, STOP_RUN_ID)}"
    stop_header.locator(".sk-action-stop").click()
    timings["stop_s"] = _wait_status(lab, STOP_RUN_ID, "stopped", 10.0)
    page.wait_for_function(stop_state + "'stopped'", timeout=15_000)
    stop_header.locator(".sk-action-resume").click()
    page.wait_for_function(f"() => /-r1$/.test({STOP_HEADER_JS}?.querySelector('.sk-link')?.href || '')", timeout=30_000)
    page.wait_for_function(stop_state + "'running'", timeout=120_000)
    timings["resumed_running_s"] = time.monotonic() - started
    stop_header.locator(".sk-action-stop").click()
    timings["stop_again_s"] = _wait_status(lab, STOP_RUN_ID, "stopped", 10.0)

    # both themes, in the same session: shapes in frames, contrast, reward ticks, the read-out, legible sizes
    dashboard = page.locator(".jp-OutputArea-output", has=page.locator(REWARD_CHART)).first
    checks = {}
    for theme, shot in (("JupyterLab Light", "dashboard.png"), ("JupyterLab Dark", "dashboard-dark.png")):
        set_theme(page, theme)
        dashboard.evaluate("e => e.scrollIntoView()")
        readout = _hover(page)
        assert re.match(r"step \d+\n", readout) and "reward mean" in readout, readout
        checks[theme] = {**_check_charts(page, theme), "readout": readout.splitlines()[:2]}
        dashboard.screenshot(path=str(artifacts / shot))
        page.mouse.move(0, 0)
        # a viewport taller than the inspector, so its screenshot is not cut by the notebook's scroll area
        page.set_viewport_size({"width": 1500, "height": 3200})
        inspector.evaluate("e => e.scrollIntoView()")
        page.wait_for_timeout(300)
        inspector.screenshot(path=str(artifacts / shot.replace("dashboard", "inspector")))
        page.set_viewport_size({"width": 1500, "height": 1000})
    set_theme(page, "JupyterLab Light")
    for width in (1400, 900):
        page.set_viewport_size({"width": width, "height": 1000})
        page.wait_for_timeout(800)  # the charts redraw at their new width
        small = [f for f in fonts(page) if f["px"] < 11 or f["height"] < 10]
        assert not small, f"{width} px: text drawn too small: {small[:5]}"
        checks[f"{width}px"] = _check_charts(page, f"light at {width} px")
    page.set_viewport_size({"width": 900, "height": 2400})  # the one-column dashboard, whole
    dashboard.evaluate("e => e.scrollIntoView()")
    page.wait_for_timeout(300)
    dashboard.screenshot(path=str(artifacts / "dashboard-900.png"))
    page.screenshot(path=str(artifacts / "notebook.png"), full_page=True)
    if os.environ.get("SKYRL_NB_UPDATE_DOCS_IMG") == "1":
        for name in DOCS_IMG:
            shutil.copy(artifacts / name, ROOT / "docs" / "img" / name)

    timings["total_s"] = time.monotonic() - started
    (artifacts / "quickstart_timing.json").write_text(json.dumps(
        {k: round(v, 1) for k, v in timings.items()} | growth | {"run_states_seen": run_states, "stages": stages,
                                                                  "checks": checks}))
