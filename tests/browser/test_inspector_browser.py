"""The trajectory inspector on a finished multi-turn run opened from disk, in a real JupyterLab.

What the quickstart's real run (single-turn arithmetic, see test_quickstart_browser.py) does not
show: assistant / tool-call / observation turns drawn distinctly, the advantage heatmap, and one
prompt's drift across steps. The run store is synthetic (tests/inspector/inspector_runs.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lab_notebook import open_and_run_all

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]

TESTS = Path(__file__).resolve().parents[1]
NOTEBOOK = "inspector_multiturn.ipynb"
CELL = '''\
from skyrl_widgets.inspector import TrajectoryInspector
TrajectoryInspector({run_dir!r})'''


def test_finished_multiturn_run_roles_advantage_heatmap_and_drift(lab, page, artifacts):
    import sys

    sys.path.insert(0, str(TESTS / "inspector"))
    from inspector_runs import write_run

    run_dir = lab.root_dir / "runs" / "multiturn-run"
    write_run(run_dir, steps=6, multi_turn=True)
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
                     "source": CELL.format(run_dir=str(run_dir))}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (skyrl-nb .venv)",
                                      "language": "python"}, "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (lab.root_dir / NOTEBOOK).write_text(json.dumps(nb))
    open_and_run_all(page, lab, NOTEBOOK)

    page.wait_for_function(
        "() => /^step 6 ·/.test(document.querySelector('.skyrl-inspector .sk-summary')?.textContent || '')",
        timeout=60_000)  # a finished run opens at its newest step
    inspector = page.locator(".skyrl-inspector")
    inspector.locator(".sk-step-input").fill("3")
    inspector.locator(".sk-step-input").press("Enter")
    page.wait_for_function(
        "() => /^step 3 ·/.test(document.querySelector('.skyrl-inspector .sk-summary')?.textContent || '')",
        timeout=10_000)
    assert inspector.locator(".sk-group").count() == 3 and inspector.locator(".sk-sample").count() == 12
    assert inspector.locator(".sk-role-observation").count() >= 1
    assert inspector.locator(".sk-role-tool-call").count() >= 1
    inspector.locator(".sk-heatmap-select").select_option("advantage")
    page.wait_for_selector(".skyrl-inspector .sk-tok", timeout=10_000)
    inspector.locator(".sk-group").nth(1).locator(".sk-drift-btn").click()
    page.wait_for_selector(".skyrl-inspector .sk-drift .sk-spark circle", timeout=15_000)
    page.wait_for_timeout(300)
    inspector.screenshot(path=str(artifacts / "inspector_multiturn.png"))
