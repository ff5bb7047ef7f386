"""The quickstart's numbers are pinned: 20 steps, seed 42, every ``reward/*`` and ``policy/*loss*`` value.

``quickstart_20_steps.json`` was recorded on the engine before the one-``Workers`` refactor (issue 11)
by ``SKYRL_NB_RECORD_FIXTURE=1 pytest tests/engine/test_quickstart_fixture.py``; a refactor that keeps
behaviour keeps every value bit for bit on the same machine (CI runs on the machine that recorded it).
The run goes through the real CLI (colocated on CPU: generator and trainer in the job's process).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from engine_runs import run_train

FIXTURE = Path(__file__).with_name("quickstart_20_steps.json")
PINNED_PREFIXES = ("reward/",)


def _pinned(row: dict) -> dict:
    return {k: v for k, v in sorted(row.items())
            if k.startswith(PINNED_PREFIXES) or (k.startswith("policy/") and "loss" in k)}


@pytest.mark.slow
def test_quickstart_20_steps_match_the_recorded_fixture(tmp_path):
    proc = run_train(tmp_path, "pinned", "builtin://tiny-qwen2", "trainer.max_training_steps=20")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "pinned" / "metrics.jsonl").read_text().splitlines()]
    got = {str(row["step"]): _pinned(row) for row in rows}
    if os.environ.get("SKYRL_NB_RECORD_FIXTURE") == "1":
        FIXTURE.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    want = json.loads(FIXTURE.read_text())
    assert list(got) == [str(s) for s in range(1, 21)]
    assert len(want["1"]) >= 6, "the fixture pins the reward and loss metrics"
    for step, values in want.items():
        assert got[step] == values, f"step {step}: {got[step]} != {values}"
