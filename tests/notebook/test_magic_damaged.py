"""`%skyrl status / list / dashboard / inspect / logs` on a damaged run store: nothing raises, the damage shows.

The damaged runs are those of tests/inspector/test_damaged_run_store.py (written with the real
RunWriter, then damaged one way each: unreadable files, silent damage such as a missing status.json, NUL
bytes, torn or out-of-order metric lines, wrong-schema parts, trajectories that is a file or a link loop),
beside a healthy run in the same run root. Folders another user owns are covered there, in a child
process run as that user.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "inspector"))
from test_damaged_run_store import DAMAGE, IDS, SILENT, SILENT_IDS, _damaged_run  # noqa: E402

# (name, damage, file or words that must show, whether the run shows as damaged)
CASES = [*DAMAGE, *((name, damage, words, False) for name, damage, _state, words, _m, _p in SILENT)]


def _shown(obj: Any) -> str:
    """What a notebook would show of ``obj``: plain text and HTML."""
    html = obj._repr_html_() if hasattr(obj, "_repr_html_") else ""
    return f"{obj!r}\n{html or ''}"


@pytest.fixture()
def no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    import skyrl_nb.cluster.local as local_mod

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("looking at a run must not start a cluster")

    monkeypatch.setattr(local_mod, "_start_head", refuse)
    monkeypatch.setenv("SKYRL_NB_STATIC", "1")


@pytest.mark.parametrize(("name", "damage", "file", "status_damaged"), CASES, ids=[*IDS, *SILENT_IDS])
def test_skyrl_commands_open_a_damaged_run(shell: Any, tmp_path: Path, no_cluster: None, name: str, damage: Any,
                                          file: str, status_damaged: bool) -> None:
    from IPython.core.error import UsageError

    _damaged_run(tmp_path, damage)
    status = shell.run_line_magic("skyrl", "status damaged")
    listed = shell.run_line_magic("skyrl", "list")
    dashboard = shell.run_line_magic("skyrl", "dashboard damaged")
    inspector = shell.run_line_magic("skyrl", "inspect damaged")
    with pytest.raises(UsageError) as logs:  # a run on disk has no job to ask for logs: one line, no traceback
        shell.run_line_magic("skyrl", "logs damaged")
    assert "'damaged'" in str(logs.value) and "\n" not in str(logs.value)
    assert {s.run_id for s in listed} == {"damaged", "healthy"}
    assert {s.run_id: s.state for s in listed}["healthy"] == "succeeded"
    for obj in (status, listed, dashboard, inspector):
        _shown(obj)  # a repr that raises would show a traceback in the notebook
    if status_damaged:
        assert "damaged" in _shown(status) and "damaged" in str(listed)
    for step in inspector.steps:  # a part is read (and named if damaged) when it is looked at
        inspector.show_step(step)
    # the damage is named once something read the damaged file
    seen = "\n".join([_shown(status), str(listed), _shown(dashboard), _shown(inspector),
                      " ".join(getattr(inspector, "warnings", []))])
    if file.endswith((".json", ".jsonl")) or " " in file:  # a file's name, or the words silent damage is named by
        assert file in seen, f"{name}: nothing says {file}:\n{seen[:2000]}"
    inspector.close()


def test_skyrl_list_names_what_it_cannot_look_at(shell: Any, tmp_path: Path, no_cluster: None) -> None:
    """A symbolic-link loop in the run root: `%skyrl list` still lists every run and names the loop once."""
    from inspector_runs import write_run

    root = tmp_path / "runs"
    write_run(root / "healthy", steps=2)
    (root / "loop").symlink_to("loop")
    listed = shell.run_line_magic("skyrl", "list")
    assert [s.run_id for s in listed] == ["healthy"]
    assert listed.warnings == ["loop cannot be read (a symbolic-link loop); skipped"]
    assert str(listed).count("symbolic-link loop") == 1 and "symbolic-link loop" in listed._repr_html_()
