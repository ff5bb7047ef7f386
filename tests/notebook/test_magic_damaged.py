"""`%skyrl status / list / dashboard / inspect` on a damaged run store: nothing raises, the damage shows.

The damaged runs are those of tests/inspector/test_damaged_run_store.py (written with the real
RunWriter, then damaged one way each), beside a healthy run in the same run root.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inspector"))
from test_damaged_run_store import DAMAGE, IDS, _damaged_run  # noqa: E402


def _shown(obj: Any) -> str:
    """What a notebook would show of ``obj``: plain text and HTML."""
    html = obj._repr_html_() if hasattr(obj, "_repr_html_") else ""
    return f"{obj!r}\n{html or ''}"


@pytest.mark.parametrize(("name", "damage", "file", "status_damaged"), DAMAGE, ids=IDS)
def test_skyrl_commands_open_a_damaged_run(shell: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          name: str, damage: Any, file: str, status_damaged: bool) -> None:
    import skyrl_nb.cluster.local as local_mod

    def no_cluster(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("looking at a run must not start a cluster")

    monkeypatch.setattr(local_mod, "_start_head", no_cluster)
    monkeypatch.setenv("SKYRL_NB_STATIC", "1")
    _damaged_run(tmp_path, damage)
    status = shell.run_line_magic("skyrl", "status damaged")
    listed = shell.run_line_magic("skyrl", "list")
    dashboard = shell.run_line_magic("skyrl", "dashboard damaged")
    inspector = shell.run_line_magic("skyrl", "inspect damaged")
    assert {s.run_id for s in listed} == {"damaged", "healthy"}
    for obj in (status, listed, dashboard):
        _shown(obj)  # a repr that raises would show a traceback in the notebook
    if status_damaged:
        assert "damaged" in _shown(status) and "damaged" in str(listed)
    # the damage is named once something read the damaged file
    seen = "\n".join([_shown(status), str(listed), _shown(dashboard), " ".join(getattr(inspector, "warnings", []))])
    if file.endswith((".json", ".jsonl")):
        assert file in seen, f"{name}: nothing says {file} was skipped:\n{seen[:2000]}"
