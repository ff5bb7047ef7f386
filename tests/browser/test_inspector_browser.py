"""The trajectory inspector on a finished multi-turn run opened from disk, in a real JupyterLab.

What the quickstart's real run (single-turn arithmetic, see test_quickstart_browser.py) does not
show: assistant / tool-call / observation turns drawn distinctly, the advantage heatmap, one prompt's
drift across steps, a ChatML prompt (system and user turns) and groups of 8 whose every sample stays on
screen. In the light and the dark theme every chip and tag is read at 4.5:1 or better. The run store is
synthetic (tests/inspector/inspector_runs.py). Screenshots go to artifacts/browser/ (and docs/img/ with
`SKYRL_NB_UPDATE_DOCS_IMG=1`).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from dom_checks import contrast, set_theme
from lab_notebook import open_and_run_all

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
NOTEBOOK = "inspector_multiturn.ipynb"
CELL = '''\
from skyrl_widgets.inspector import TrajectoryInspector
TrajectoryInspector({run_dir!r})'''


def test_finished_multiturn_run_roles_advantage_heatmap_and_drift(lab, page, artifacts):
    import sys

    sys.path.insert(0, str(TESTS / "inspector"))
    from inspector_runs import write_run

    run_dir = lab.root_dir / "runs" / "multiturn-run"
    write_run(run_dir, steps=6, multi_turn=True, chat=True, group_size=8)
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
    assert inspector.locator(".sk-group").count() == 3 and inspector.locator(".sk-sample").count() == 24
    assert inspector.locator(".sk-role-observation").count() >= 1
    assert inspector.locator(".sk-role-tool-call").count() >= 1
    # all n = 8 samples of a group are on screen: the cards wrap inside the inspector, none runs off its edge
    frame = inspector.bounding_box()
    group = inspector.locator(".sk-group").nth(1)
    cards = [group.locator(".sk-sample").nth(i).bounding_box() for i in range(group.locator(".sk-sample").count())]
    assert len(cards) == 8 and all(frame["x"] <= c["x"] and c["x"] + c["width"] <= frame["x"] + frame["width"] + 0.5
                                   for c in cards), (cards, frame)
    assert len({round(c["y"]) for c in cards}) > 1  # on more than one row at 1500 px
    # the prompt as chat turns (ChatML: system, user, then the assistant's turn the completions fill), the
    # expected answer beside the mean reward, labelled tags
    assert [r.lower() for r in group.locator(".sk-prompt .sk-role").all_inner_texts()] == ["system", "user", "assistant"]
    assert group.locator(".sk-truth").inner_text().startswith("expected ")
    assert "env" in group.locator(".sk-meta-tag").first.inner_text()
    group.locator(".sk-raw-toggle").click()
    assert group.locator(".sk-prompt .sk-special").count() == 5  # 3 <|im_start|>, 2 <|im_end|>: dimmed
    group.locator(".sk-raw-toggle").click()
    inspector.locator(".sk-heatmap-select").select_option("advantage")
    page.wait_for_selector(".skyrl-inspector .sk-tok", timeout=10_000)
    inspector.locator(".sk-group").nth(1).locator(".sk-drift-btn").click()
    page.wait_for_selector(".skyrl-inspector .sk-drift .sk-spark circle", timeout=15_000)
    page.wait_for_timeout(300)
    for theme, shot in (("JupyterLab Light", "inspector_multiturn.png"), ("JupyterLab Dark", "inspector_multiturn-dark.png")):
        set_theme(page, theme)
        chips = contrast(page, ".skyrl-inspector .sk-badge, .skyrl-inspector .sk-tag-label, .skyrl-inspector .sk-state, "
                               ".skyrl-inspector .sk-role, "
                               ".skyrl-inspector .sk-completion, .skyrl-inspector .sk-prompt-text")
        low = [c for c in chips if c["ratio"] < 4.5]
        assert chips and not low, f"{theme}: {low[:5]}"
        page.set_viewport_size({"width": 1500, "height": 3200})  # the whole inspector, not the notebook's scroll window
        inspector.evaluate("e => e.scrollIntoView()")
        page.wait_for_timeout(300)
        inspector.screenshot(path=str(artifacts / shot))
        page.set_viewport_size({"width": 1500, "height": 1000})
        if os.environ.get("SKYRL_NB_UPDATE_DOCS_IMG") == "1":
            shutil.copy(artifacts / shot, ROOT / "docs" / "img" / shot)
    set_theme(page, "JupyterLab Light")
