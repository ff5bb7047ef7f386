"""The playground in a real JupyterLab (headless chromium): a prompt typed in, Run pressed, two answers and two
rewards out, in the light and the dark theme.

The answers come from a `generate` defined in the notebook's cell (a sleep, then a sum), not from an evaluation
job: the browser tests start no Ray cluster, and the real job behind the default `generate` is proven without a
browser (tests/notebook/test_playground.py::test_playground_on_the_local_cluster). Asserted in the DOM: Run is
disabled while the kernel generates and the status line counts the seconds; each pane has its model's name, its
answer and its reward as a badge (a reward function's error beside it); an empty prompt is refused in one line on
the status line; a prompt picked from an evaluation's worst prompts (a real EvalResult over an eval store the
engine's writers wrote) fills both boxes and runs; every text of the widget reads at 4.5:1 or better in both themes.
About 30 s here (most of it JupyterLab and the kernel starting).
Screenshots go to artifacts/browser/ (playground.png, playground-dark.png).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from dom_checks import contrast, set_theme
from lab_notebook import open_and_run_all

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "eval"))  # eval_stores: the tests' eval-store writer
pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.timeout(240)]

NOTEBOOK = "playground.ipynb"
CELL = '''\
import time
import skyrl_nb
from skyrl_nb.eval_results import EvalResult

def generate(prompt, ground_truth):
    """base always says 4; trained adds up the prompt. Reward 1 when an answer is the ground truth."""
    time.sleep(2.5)  # long enough to see Run disabled and the seconds counted
    text = prompt if isinstance(prompt, str) else prompt[-1]["content"]
    right = str(sum(int(x) for x in text.split("+")))
    scored = lambda answer: None if ground_truth is None else float(answer == ground_truth)
    error = None if ground_truth is not None else "exact: this row has no ground truth"
    return [{"model": "base", "response": "I think it is 4", "reward": scored("4"), "reward_error": error},
            {"model": "trained", "response": right, "reward": scored(right), "reward_error": error}]

pg = skyrl_nb.playground({"base": "builtin://tiny-qwen2", "trained": "runs/quickstart"}, generate=generate,
                         eval_result=EvalResult({eval_dir!r}))
pg'''
WIDGET = ".skyrl-playground"
TEXTS = (f"{WIDGET} .sk-title, {WIDGET} .sk-model, {WIDGET} .sk-badge, {WIDGET} .sk-answer, {WIDGET} .sk-status, "
         f"{WIDGET} .sk-reward-error, {WIDGET} .sk-prompt, {WIDGET} .sk-truth, {WIDGET} .sk-run")


def _evaluation(root: Path) -> Path:
    """An eval store (the engine's own writers, real Parquet) where base solved 8+5 and trained lost it."""
    from eval_stores import write_eval_store

    chat = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    rows = lambda rewards: [{"prompt_index": i, "sample_index": 0, "prompt": chat.format(q), "response": "x",  # noqa: E731
                             "reward": r, "response_length": 1, "ground_truth": truth, "data_source": "arithmetic",
                             "reward_error": None} for i, (q, truth, r) in enumerate(zip(("8+5", "2+2"), ("13", "4"),
                                                                                         rewards, strict=True))]
    return write_eval_store(root / "evals", {"base": rows([1.0, 0.0]), "trained": rows([0.0, 0.0])})


def _panes(page) -> list[dict]:
    return page.evaluate(f"""() => Array.from(document.querySelectorAll('{WIDGET} .sk-pane')).map(p => ({{
        model: p.querySelector('.sk-model')?.textContent, answer: p.querySelector('.sk-answer')?.textContent,
        reward: p.querySelector('.sk-reward')?.textContent || null,
        error: p.querySelector('.sk-reward-error')?.textContent || null}}))""")


def _run_and_watch(page) -> None:
    """Press Run; while the kernel generates, Run is disabled and the status line counts seconds."""
    run = page.locator(f"{WIDGET} .sk-run")
    run.click()
    page.wait_for_function(f"() => document.querySelector('{WIDGET} .sk-run').disabled", timeout=10_000)
    page.wait_for_function(
        f"() => /on the cluster… [1-9]\\d* s$/.test(document.querySelector('{WIDGET} .sk-status').textContent)",
        timeout=10_000)
    assert all(p["answer"] == "generating…" and p["reward"] is None for p in _panes(page))
    page.wait_for_function(f"() => !document.querySelector('{WIDGET} .sk-run').disabled", timeout=30_000)


def _readable(page, theme: str) -> None:
    texts = contrast(page, TEXTS)
    low = [t for t in texts if t["ratio"] < 4.5]
    assert len(texts) >= 9 and not low, f"{theme}: {low[:5]}"


def test_prompt_in_two_answers_and_two_rewards_out_in_both_themes(lab, page, artifacts):
    source = CELL.replace("{eval_dir!r}", repr(str(_evaluation(lab.root_dir))))
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": source}],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (skyrl-nb .venv)",
                                      "language": "python"}, "language_info": {"name": "python"}},
          "nbformat": 4, "nbformat_minor": 5}
    (lab.root_dir / NOTEBOOK).write_text(json.dumps(nb))
    open_and_run_all(page, lab, NOTEBOOK)
    page.wait_for_selector(f"{WIDGET} .sk-run", timeout=60_000)
    widget = page.locator(WIDGET)
    assert [p["model"] for p in _panes(page)] == ["base", "trained"]  # named before the first answer
    assert all(p["answer"] == "no answer yet" for p in _panes(page))

    # nothing typed: refused on the status line, in one line
    widget.locator(".sk-run").click()
    page.wait_for_selector(f"{WIDGET} .sk-status.sk-failed", timeout=10_000)
    assert widget.locator(".sk-status").inner_text() == "prompt: empty; type a question for the models"

    # light theme: a prompt and its ground truth typed in, Run, two answers and two rewards out
    set_theme(page, "JupyterLab Light")
    widget.locator(".sk-prompt").fill("17+25")
    widget.locator(".sk-truth").fill("42")
    _run_and_watch(page)
    assert _panes(page) == [
        {"model": "base", "answer": "I think it is 4", "reward": "reward 0", "error": None},
        {"model": "trained", "answer": "42", "reward": "reward 1", "error": None}]
    status = widget.locator(".sk-status").inner_text()
    assert re.fullmatch(r"2 answers in \d+\.\d s \(rewards: base 0 · trained 1\)", status), status
    assert "sk-failed" not in (widget.locator(".sk-status").get_attribute("class") or "")
    badges = page.evaluate(f"""() => Array.from(document.querySelectorAll('{WIDGET} .sk-reward'))
        .map(b => getComputedStyle(b).backgroundColor)""")
    assert len(badges) == 2 and badges[0] != badges[1]  # 0 and 1 are told apart by colour too
    _readable(page, "light")
    widget.screenshot(path=str(artifacts / "playground.png"))

    # dark theme: a prompt picked from the evaluation's worst prompts (the lost one first) fills both boxes;
    # then the ground truth cleared: the reward function's error beside each answer
    set_theme(page, "JupyterLab Dark")
    options = widget.locator(".sk-examples option").all_inner_texts()
    assert options[1:] == ["#0 lost · 8+5", "#1 mean reward 0.00 · 2+2"], options
    widget.locator(".sk-examples").select_option("0")
    assert widget.locator(".sk-prompt").input_value() == "8+5" and widget.locator(".sk-truth").input_value() == "13"
    _run_and_watch(page)
    assert [(p["answer"], p["reward"]) for p in _panes(page)] == [("I think it is 4", "reward 0"), ("13", "reward 1")]
    widget.locator(".sk-truth").fill("")
    _run_and_watch(page)
    panes = _panes(page)
    assert [(p["answer"], p["reward"]) for p in panes] == [("I think it is 4", "no reward"), ("13", "no reward")]
    assert all(p["error"] == "reward error: exact: this row has no ground truth" for p in panes)
    assert re.fullmatch(r"2 answers in \d+\.\d s", widget.locator(".sk-status").inner_text())
    _readable(page, "dark")
    widget.screenshot(path=str(artifacts / "playground-dark.png"))
    set_theme(page, "JupyterLab Light")
