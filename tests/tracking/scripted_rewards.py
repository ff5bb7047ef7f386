"""A reward function with a script, for the alert and Ray-metrics runs (``reward.functions`` names it
``scripted_rewards:scripted``; the engine imports it with ``tests/tracking`` on its PYTHONPATH).

It knows the step from how often it was called: ``SCRIPTED_SAMPLES`` calls a step (prompts x samples, no eval),
the first call counting for step ``SCRIPTED_FIRST_STEP`` (1, or the step a resume continues at). Then:

- reward 1.0 before step ``SCRIPTED_ZERO_FROM``, 0.0 from it on (a reward collapse);
- at step ``SCRIPTED_HOLD_AT`` one call waits until ``SCRIPTED_CONTROL`` (an URL) answers ``{"hold": false}``
  (a stall the test ends when it has seen what it wants);
- at step ``SCRIPTED_RAISE_AT`` it raises (with ``reward.errors=fail``: the run fails).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request

_lock = threading.Lock()
_calls = 0
_held: set[int] = set()


def _number(name: str, default: int = 0) -> int:
    return int(os.environ.get(name) or default)


def scripted(prompt, completion, **columns) -> float:
    global _calls
    with _lock:
        step = _number("SCRIPTED_FIRST_STEP", 1) + _calls // _number("SCRIPTED_SAMPLES", 1)
        _calls += 1
        hold = step == _number("SCRIPTED_HOLD_AT") and step not in _held
        _held.add(step)
    if step == _number("SCRIPTED_RAISE_AT"):
        raise RuntimeError(f"scripted failure at step {step}")
    if hold:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            with urllib.request.urlopen(os.environ["SCRIPTED_CONTROL"], timeout=5) as answer:
                if not json.loads(answer.read())["hold"]:
                    break
            time.sleep(0.2)
    return 0.0 if step >= _number("SCRIPTED_ZERO_FROM", 10**9) else 1.0
