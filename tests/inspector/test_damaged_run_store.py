"""Damaged run stores: every reader, list_runs, the writer, the dashboard and the inspector open them.

A run is written with the real ``RunWriter`` (metrics, events, trajectory parts), then damaged one way
(status.json not UTF-8 or not an object, a metrics or events line that is not an object, a 0-byte or
corrupt Parquet part, a config.yaml that is not YAML). Nothing may raise; what was skipped shows as
a warning line naming the file, once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from inspector_runs import write_run

from skyrl_core.runs import DAMAGED, RunReader, RunWriter, list_runs

STEPS = 4


def _replace(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda run: (run / name).write_bytes(data)


def _insert_line(name: str, line: bytes, after: int = 1) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        lines = (run / name).read_bytes().splitlines(keepends=True)
        (run / name).write_bytes(b"".join(lines[:after]) + line + b"\n" + b"".join(lines[after:]))
    return damage


def _part(step: int, data: bytes) -> Callable[[Path], None]:
    return lambda run: (run / "trajectories" / f"step_{step:06d}.parquet").write_bytes(data)


# (name, damage, the file a warning must name, status damaged?)
DAMAGE: list[tuple[str, Callable[[Path], None], str, bool]] = [
    ("status not UTF-8", _replace("status.json", b'{"state": "succ\xff\xfeeded"}'), "status.json", True),
    ("status a list", _replace("status.json", b"[1]"), "status.json", True),
    ("status a number", _replace("status.json", b"42"), "status.json", True),
    ("status empty", _replace("status.json", b""), "status.json", True),
    ("status not JSON", _replace("status.json", b'{"state": "running", "st'), "status.json", True),
    ("status fields of the wrong kind", _replace("status.json", b'{"state": "exploded", "step": "x", '
                                                 b'"heartbeat": "soon", "error": 5, "total_steps": true}'),
     "status.json", False),
    ("metrics line a list", _insert_line("metrics.jsonl", b"[1, 2]"), "metrics.jsonl", False),
    ("metrics line a number", _insert_line("metrics.jsonl", b"42"), "metrics.jsonl", False),
    ("metrics line not UTF-8", _insert_line("metrics.jsonl", b'{"step": 9, "x": "\xff"}'), "metrics.jsonl", False),
    ("metrics line without a step", _insert_line("metrics.jsonl", b'{"reward/avg_raw_reward": 0.5}'),
     "metrics.jsonl", False),
    ("metrics line torn mid-file", _insert_line("metrics.jsonl", b'{"step": 3, "rew'), "metrics.jsonl", False),
    ("events line a list", _insert_line("events.jsonl", b"[1]", after=0), "events.jsonl", False),
    ("newest part 0 bytes", _part(STEPS, b""), f"step_{STEPS:06d}.parquet", False),
    ("middle part corrupt", _part(2, b"PAR1 this is not parquet PAR1"), "step_000002.parquet", False),
    ("config not YAML", _replace("config.yaml", b"run: [1, 2\n"), "config.yaml", False),
    ("config not UTF-8", _replace("config.yaml", b"run: {run_id: \xff}\n"), "config.yaml", False),
]
IDS = [d[0] for d in DAMAGE]


def _damaged_run(tmp_path: Path, damage: Callable[[Path], None]) -> Path:
    run = tmp_path / "runs" / "damaged"
    writer = write_run(run, steps=STEPS)
    writer.log_event("checkpoint_saved", step=2, path="x")
    damage(run)
    write_run(tmp_path / "runs" / "healthy", steps=2)
    return run


def _read_everything(reader: RunReader) -> None:
    """Every reading method, twice (the second time must add no warning)."""
    for _ in range(2):
        status = reader.status()
        assert isinstance(status["state"], str) and isinstance(status.get("step"), int)
        summary = reader.summary()
        str(summary), summary._repr_html_(), repr(reader), reader._repr_html_()
        rows = reader.metrics()
        assert all(isinstance(r, dict) and isinstance(r["step"], int) for r in rows)
        frame = reader.metrics_frame()
        assert len(frame) == len(rows)
        reader.poll(), reader.events(), reader.poll_events(), reader.config()
        for step in reader.trajectory_steps():
            reader.trajectories(step)
            reader.trajectories(step, columns=["reward", "nope"])


@pytest.mark.parametrize(("name", "damage", "file", "status_damaged"), DAMAGE, ids=IDS)
def test_readers_skip_the_damage_and_say_so_once(tmp_path: Path, name: str, damage: Callable[[Path], None],
                                                 file: str, status_damaged: bool) -> None:
    run = _damaged_run(tmp_path, damage)
    reader = RunReader(run)
    _read_everything(reader)
    assert reader.warnings and all(file in w for w in reader.warnings), reader.warnings
    assert len(reader.warnings) == len(set(reader.warnings))
    before = list(reader.warnings)
    _read_everything(reader)
    assert reader.warnings == before  # reported once
    assert (reader.status()["state"] == DAMAGED) == status_damaged
    if file == "metrics.jsonl":
        assert [r["step"] for r in reader.metrics()] == list(range(1, STEPS + 1))
    if file.endswith(".parquet"):
        damaged_step = int(file[5:11])
        assert reader.trajectories(damaged_step).empty
        assert reader.trajectory_steps() == list(range(1, STEPS + 1))
    runs = {s.run_id: s for s in list_runs(tmp_path / "runs")}
    assert set(runs) == {"damaged", "healthy"} and runs["healthy"].state == "succeeded"
    assert (runs["damaged"].state == DAMAGED) == status_damaged
    assert runs["damaged"].warnings or file.endswith((".parquet", ".yaml")) or file == "events.jsonl"
    str(list_runs(tmp_path / "runs")), list_runs(tmp_path / "runs")._repr_html_()


@pytest.mark.parametrize(("name", "damage", "file", "status_damaged"), DAMAGE, ids=IDS)
def test_the_writer_reopens_and_resumes_a_damaged_run(tmp_path: Path, name: str, damage: Callable[[Path], None],
                                                      file: str, status_damaged: bool) -> None:
    run = _damaged_run(tmp_path, damage)
    writer = RunWriter(run)
    if file == "status.json":
        assert writer.warnings and "status.json" in writer.warnings[0]
        if status_damaged:
            assert "fresh status" in writer.warnings[0]
    writer.truncate_after(2)  # a resume from step 2's checkpoint
    if file == "metrics.jsonl" and name != "metrics line without a step":
        assert any("metrics.jsonl" in w and "dropped" in w for w in writer.warnings)
    writer.set_status("running", step=2, total_steps=STEPS)
    writer.log_metrics(3, {"reward/avg_raw_reward": 0.9})
    reader = RunReader(run)
    assert [r["step"] for r in reader.metrics()] == [1, 2, 3]
    assert reader.status()["state"] == "running"
    assert [e["kind"] for e in reader.events() if e["kind"] == "warning"] == ["warning"] * len(writer.warnings)


@pytest.mark.parametrize(("name", "damage", "file", "status_damaged"), DAMAGE, ids=IDS)
def test_dashboard_and_inspector_open_a_damaged_run(tmp_path: Path, name: str, damage: Callable[[Path], None],
                                                    file: str, status_damaged: bool) -> None:
    from skyrl_nb.dashboard import Dashboard
    from skyrl_widgets.inspector import TrajectoryInspector

    run = _damaged_run(tmp_path, damage)
    dash = Dashboard(run, static=True)
    dash.refresh()
    assert dash.state == (DAMAGED if status_damaged else dash.state)
    text, svg, bundle = repr(dash), dash.to_svg(), dash._repr_mimebundle_()
    assert svg.startswith("<svg") and "text/html" in bundle
    if file in ("status.json", "metrics.jsonl", "events.jsonl"):
        assert dash.warnings and "skipped: " in text and file in text
        header = dash.widget().children[0]  # the live header says it too
        assert header.warnings == dash.warnings and "skipped: " in dash._html()
    insp = TrajectoryInspector(run, static=True, auto_refresh=0)
    try:
        assert insp.steps == list(range(1, STEPS + 1))
        for step in insp.steps:
            insp.show_step(step)
            assert insp.view["step"] == step
        insp.refresh(full=True)
        insp.drift(budget_s=5.0) if insp.view.get("groups") else None
        insp.frame(1)
        if file.endswith(".parquet"):
            damaged_step = int(file[5:11])
            insp.show_step(damaged_step)
            assert insp.view["samples"] == 0
            assert any(file in w for w in insp.warnings) and "skipped" in insp._repr_html_()
        elif file in ("status.json", "config.yaml"):
            assert any(file in w for w in insp.warnings)
    finally:
        insp.close()
