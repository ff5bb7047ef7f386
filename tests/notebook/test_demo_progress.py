"""`make demo`'s progress lines while the notebook runs, and the one "reward first -> last" the demo, the
notebook and the dashboard print."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from skyrl_core.runs import RunWriter, reward_change


def test_progress_lines_follow_the_run_store(tmp_path: Path) -> None:
    from skyrl_nb.demo import progress_lines

    run_dir = tmp_path / "demo-run"
    lines: list[str] = []
    stop = threading.Event()
    reporter = threading.Thread(target=progress_lines, args=(run_dir, stop, 0.2, lines.append), daemon=True)
    reporter.start()
    time.sleep(0.5)  # before the job writes anything
    writer = RunWriter(run_dir)
    writer.set_status("running", step=0, total_steps=10)
    for step in range(1, 7):
        writer.log_metrics(step, {"reward/avg_raw_reward": step / 10})
        writer.set_status(step=step)
        time.sleep(0.25)
    stop.set()
    reporter.join(timeout=5)
    assert lines[0].startswith("demo: starting the Ray head and the job (")
    stepped = [line for line in lines if line.startswith("demo: step ")]
    assert stepped and all("/10, running" in line for line in stepped)
    assert any(", reward 0." in line and ", ETA 0 min 0" in line for line in stepped), stepped
    assert stepped[-1].startswith(("demo: step 5/10", "demo: step 6/10"))


def test_demo_notebook_and_dashboard_say_the_same_reward_change(tmp_path: Path) -> None:
    from skyrl_nb.dashboard import Dashboard
    from skyrl_nb.demo import summarize

    writer = RunWriter(tmp_path / "r")
    writer.set_status("running", step=0, total_steps=40)
    rewards = [0.1 + 0.02 * step for step in range(1, 41)]
    for step, reward in enumerate(rewards, start=1):
        writer.log_metrics(step, {"reward/avg_raw_reward": reward})
    writer.set_status("succeeded", step=40)
    expected = reward_change(rewards)
    assert expected.window == 10 and str(expected) == "0.210 -> 0.810 (+0.600; means of the first and last 10 steps of 40)"
    assert summarize(tmp_path / "r")["reward"] == str(expected)  # make demo's summary line
    dash = Dashboard(tmp_path / "r", static=True)
    dash.refresh()
    assert f"reward {expected}" in dash.header()  # the dashboard's header
    import json

    notebook = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb").read_text())
    cells = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    assert any("change = job.run.reward_change()" in c and 'reward {change}' in c for c in cells)  # the notebook's
