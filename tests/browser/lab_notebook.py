"""Driving a notebook in the browser tests: wait for an idle kernel, run all cells, read prompts."""

from __future__ import annotations

import re
import time


def wait_kernel_idle(lab, timeout: float = 90) -> None:
    """/api/kernels shows our kernel connected and idle (it may answer 500 while starting)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            kernels = lab.api("/api/kernels")
            last = kernels
            # any kernel: an earlier test's kernel (its page closed, 0 connections) may still be listed first
            if any(k.get("connections", 0) >= 1 and k.get("execution_state") == "idle" for k in kernels or []):
                return
        except Exception as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"kernel not connected and idle after {timeout} s: {last}")


def prompts(page) -> list[str]:
    return page.evaluate(
        "() => Array.from(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')).map(p => p.textContent)")


def open_and_run_all(page, lab, name: str) -> None:
    """Open `name`, wait for an idle connected kernel, run every cell (retry while the first prompt is `[ ]:`)."""
    page.goto(lab.notebook_url(name))
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell", timeout=60_000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=30_000)
    wait_kernel_idle(lab)
    page.wait_for_function("() => /Idle/.test(document.querySelector('#jp-main-statusbar')?.textContent || '')",
                           timeout=30_000)
    for _ in range(4):
        page.locator(".jp-NotebookPanel .jp-Cell").first.click()
        # not awaited: the command's promise settles only when the last cell has finished, and
        # page.evaluate would wait for it (the test then saw the page only after the job ended)
        page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not re.search(r"\[(\*|\d+)\]", prompts(page)[0]):
            page.wait_for_timeout(250)
        page.wait_for_timeout(1000)  # a prompt that flashed `[*]` and fell back shows `[ ]` again
        if re.search(r"\[(\*|\d+)\]", prompts(page)[0]):
            return
    raise AssertionError(f"the notebook's cells never started running (prompts {prompts(page)})")
