"""Fixtures for the inspector tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from inspector_runs import write_run


@pytest.fixture

def finished_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "finished"
    write_run(run_dir, steps=5)
    return run_dir
