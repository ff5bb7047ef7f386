"""Damaged run stores: every reader, list_runs, the writer, the dashboard and the inspector open them.

A run is written with the real ``RunWriter`` (metrics, events, trajectory parts), then damaged one way
(status.json not UTF-8 or not an object, a metrics or events line that is not an object, a 0-byte or
corrupt Parquet part, a config.yaml that is not YAML). Nothing may raise; what was skipped shows as
a warning line naming the file, once.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inspector_runs import write_run

from skyrl_core.runs import DAMAGED, RunReader, RunUnreadable, RunWriter, list_runs, open_run

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


# ------------------------------------------------------------------ silent damage: named, the rest still read
ALL = list(range(1, STEPS + 1))


def _lines(run: Path) -> list[bytes]:
    return (run / "metrics.jsonl").read_bytes().splitlines(keepends=True)


def _metrics(data: Callable[[list[bytes]], bytes]) -> Callable[[Path], None]:
    return lambda run: (run / "metrics.jsonl").write_bytes(data(_lines(run)))


def _part_table(step: int, table: Callable[[], Any]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        import pyarrow.parquet as pq

        pq.write_table(table(), run / "trajectories" / f"step_{step:06d}.parquet")
    return damage


def _other_columns() -> Any:
    import pyarrow as pa

    return pa.table({"a": [1, 2], "b": ["x", "y"]})


def _reward_as_text() -> Any:
    import pyarrow as pa
    from inspector_runs import step_rows

    return pa.Table.from_pylist([{**row, "reward": str(row["reward"])} for row in step_rows(3)])


def _trajectories(make: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        shutil.rmtree(run / "trajectories")
        make(run / "trajectories")
    return damage


# (name, damage, the run's state, words a warning must hold, metric steps read, trajectory steps read)
SILENT: list[tuple[str, Callable[[Path], None], str, str, list[int], list[int]]] = [
    ("status.json missing", lambda run: (run / "status.json").unlink(), "no_status", "status.json is missing",
     ALL, ALL),
    ("metrics.jsonl 4 KiB of NUL bytes", _metrics(lambda lines: b"\0" * 4096), "succeeded",
     "metrics.jsonl line 1: 4096 NUL byte(s) at byte 0", [], ALL),
    ("a NUL block, then more lines", _metrics(lambda lines: lines[0] + b"\0" * 4096 + b"".join(lines[1:])),
     "succeeded", "4096 NUL byte(s) at byte", ALL, ALL),
    ("a finished run's last line torn", _metrics(lambda lines: b"".join(lines)[:-15]), "succeeded",
     "cut short and the run has ended", ALL[:-1], ALL),
    ("metric lines out of order", _metrics(lambda lines: lines[0] + lines[2] + lines[1] + b"".join(lines[3:])),
     "succeeded", "step 2 comes after step 3 (out of order)", ALL, ALL),
    ("a step's line dropped", _metrics(lambda lines: b"".join(lines[:2] + lines[3:])), "succeeded",
     "step 3 missing (step 2, then step 4)", [1, 2, 4], ALL),
    ("a part with other columns", _part_table(2, _other_columns), "succeeded",
     "step_000002.parquet is not a trajectory part: it has none of the columns prompt, response, reward", ALL, ALL),
    ("a part whose reward is text", _part_table(3, _reward_as_text), "succeeded",
     "step_000003.parquet is not a trajectory part: it has reward of type string, not a number", ALL, ALL),
    ("trajectories a file", _trajectories(lambda path: path.write_text("not a folder")), "succeeded",
     "trajectories cannot be read (a file, not a folder)", ALL, []),
    ("trajectories a symlink loop", _trajectories(lambda path: path.symlink_to("trajectories")), "succeeded",
     "trajectories cannot be read (a symbolic-link loop)", ALL, []),
]
SILENT_IDS = [s[0] for s in SILENT]


@pytest.mark.parametrize(("name", "damage", "state", "words", "metric_steps", "part_steps"), SILENT, ids=SILENT_IDS)
def test_silent_damage_is_named_by_every_reader(tmp_path: Path, name: str, damage: Callable[[Path], None], state: str,
                                                words: str, metric_steps: list[int], part_steps: list[int]) -> None:
    """Each reader (RunReader, list_runs, the dashboard, the inspector) names the damage once, reads every
    step that is there, in step order, and raises nothing; the healthy run beside it is listed."""
    from skyrl_nb.dashboard import Dashboard
    from skyrl_widgets.inspector import TrajectoryInspector

    run = _damaged_run(tmp_path, damage)
    reader = RunReader(run)
    _read_everything(reader)
    _read_everything(reader)
    assert reader.status()["state"] == state
    assert [r["step"] for r in reader.metrics()] == metric_steps
    assert reader.trajectory_steps() == part_steps
    named = [w for w in reader.warnings if words in w]
    assert len(named) == 1 and len(reader.warnings) == len(set(reader.warnings)), reader.warnings
    part_damage = "parquet" in words
    summaries = {s.run_id: s for s in list_runs(tmp_path / "runs")}
    assert set(summaries) == {"damaged", "healthy"} and summaries["healthy"].state == "succeeded"
    assert summaries["damaged"].state == state
    if not part_damage and "trajectories" not in words:  # a summary reads status and metrics, not parts
        assert any(words in w for w in summaries["damaged"].warnings), summaries["damaged"].warnings
    dash = Dashboard(run, static=True)
    dash.refresh()
    assert dash.series.data["step"] == metric_steps  # out-of-order lines drop no step from the curves
    if not part_damage and "trajectories" not in words:
        assert words in repr(dash)
    insp = TrajectoryInspector(run, static=True, auto_refresh=0)
    try:
        assert insp.steps == part_steps
        for step in insp.steps:
            insp.show_step(step)
        insp.drift(budget_s=5.0) if insp.view.get("groups") else None
        if part_damage or "trajectories" in words:
            assert [w for w in insp.warnings if words in w], insp.warnings
            assert "skipped: " in insp._repr_html_()
        if part_damage:
            bad = int(words.partition("step_")[2][:6])
            insp.show_step(bad)
            assert insp.view["samples"] == 0
            healthy = [s for s in part_steps if s != bad]
            assert all(insp.data.rows(s) for s in healthy)  # the other parts still read
            assert len([w for w in insp.warnings if words in w]) == 1
    finally:
        insp.close()


def test_a_line_being_written_is_not_damage_and_a_missing_newline_loses_nothing(tmp_path: Path) -> None:
    """While a run is running, a torn last line is a line being written: not named, read once complete. A last
    line whose newline alone is missing is a whole row: read, and read once when the newline comes."""
    live = write_run(tmp_path / "live", steps=2, state="running")
    log = tmp_path / "live" / "metrics.jsonl"
    reader = RunReader(tmp_path / "live")
    assert [r["step"] for r in reader.poll()] == [1, 2]
    with log.open("ab") as f:
        f.write(b'{"step": 3, "time": 1.5, "reward/avg_')
    assert reader.poll() == [] and reader.warnings == []
    with log.open("ab") as f:
        f.write(b'raw_reward": 0.5}\n')
    assert [r["step"] for r in reader.poll()] == [3] and reader.warnings == []
    live.set_status("succeeded", step=3)

    finished = tmp_path / "finished"
    write_run(finished, steps=3)
    (finished / "metrics.jsonl").write_bytes((finished / "metrics.jsonl").read_bytes()[:-1])
    reader = RunReader(finished)
    assert [r["step"] for r in reader.poll()] == [1, 2, 3] and reader.warnings == []
    with (finished / "metrics.jsonl").open("ab") as f:
        f.write(b"\n")
    assert reader.poll() == []
    RunWriter(finished).log_metrics(4, {"reward/avg_raw_reward": 0.9})
    assert [r["step"] for r in reader.poll()] == [4] and reader.warnings == []


def test_one_bad_entry_in_a_run_root_hides_no_run(tmp_path: Path) -> None:
    """A symbolic-link loop, a link to the root itself, a dangling link, a stray file and an empty folder in a
    run root: list_runs lists every run, names each entry it could not look at once, and raises nothing."""
    root = tmp_path / "runs"
    write_run(root / "healthy", steps=2)
    write_run(root / "second", steps=3, state="failed")
    (root / "loop-a").symlink_to("loop-b")
    (root / "loop-b").symlink_to("loop-a")
    (root / "itself").symlink_to(".")
    (root / "dangling").symlink_to("nowhere")
    (root / "notes.txt").write_text("a stray file")
    (root / "empty").mkdir()
    listed = list_runs(root)
    assert {s.run_id: s.state for s in listed} == {"healthy": "succeeded", "second": "failed"}
    assert sorted(listed.warnings) == ["loop-a cannot be read (a symbolic-link loop); skipped",
                                       "loop-b cannot be read (a symbolic-link loop); skipped"]
    text, page = str(listed), listed._repr_html_()
    assert "healthy" in text and text.count("symbolic-link loop") == 2 and page.count("symbolic-link loop") == 2
    missing = list_runs(tmp_path / "missing-root")  # a root not made yet: no runs, nothing to name
    assert list(missing) == [] and missing.warnings == [] and str(missing) == "(no runs)"
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        open_run(root / "empty")


def test_an_inspector_whose_init_failed_closes_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    """ipywidgets' ``Widget.__del__`` closes a widget whose ``__init__`` raised: that close must not raise
    (it printed ``Exception ignored in Widget.__del__ ... no attribute '_stop'``)."""
    import gc
    import sys

    from skyrl_widgets.inspector import TrajectoryInspector

    ignored: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: ignored.append(f"{u.exc_type.__name__}: {u.exc_value}"))
    with pytest.raises(TypeError, match="expected a run directory"):
        TrajectoryInspector(42)
    gc.collect()
    assert ignored == []


# ------------------------------------------------------------------ what another user's files look like
NOBODY = 65534
#: Runs whose folder, trajectories, logs or one part this user may not read (as on a shared FSx run root).
LOCKED = ("private", "private-trajectories", "private-logs", "private-part")


def _locked_root(base: Path, mode_dir: int, mode_file: int) -> Path:
    """A world-traversable run root with a healthy run, the LOCKED runs and a symbolic-link loop."""
    root = base / "runs"
    write_run(root / "healthy", steps=2)
    for name in LOCKED:
        write_run(root / name, steps=3).log_event("checkpoint_saved", step=2, path="x")
    (root / "loop").symlink_to("loop")
    for path in [base, *base.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    (root / "private").chmod(mode_dir)
    (root / "private-trajectories" / "trajectories").chmod(mode_dir)
    for name in ("status.json", "metrics.jsonl", "events.jsonl"):
        (root / "private-logs" / name).chmod(mode_file)
    (root / "private-part" / "trajectories" / "step_000002.parquet").chmod(mode_file)
    return root


def _read_as_this_user(root: str) -> dict[str, Any]:
    """Every reader and every read command of ``%skyrl`` (in a real IPython shell) over ``root``, as the user
    this process runs as: what each returned (as a notebook would show it), its one-line error, or the
    traceback it raised. Runs in a child process started as another user (see the test below)."""
    import json
    import sys
    import traceback

    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell

    import skyrl_nb.cluster.local as local_mod
    from skyrl_widgets.inspector import TrajectoryInspector

    out: dict[str, Any] = {"unraisable": []}
    sys.unraisablehook = lambda u: out["unraisable"].append(f"{u.exc_type.__name__}: {u.exc_value} in {u.object!r}")

    def attempt(key: str, read: Callable[[], Any], raises: type[Exception] = UsageError) -> None:
        try:
            out[key] = {"value": read()}
        except raises as err:  # what the API is documented to raise: one line
            out[key] = {"usage": f"{type(err).__name__}: {err}"}
        except Exception:
            out[key] = {"traceback": traceback.format_exc()}

    def shown(obj: Any) -> str:
        html = obj._repr_html_() if hasattr(obj, "_repr_html_") else ""
        return f"{obj!r}\n{html or ''}"

    def everything(run: Path) -> dict[str, Any]:
        reader = RunReader(run)
        status = reader.status()
        steps = reader.trajectory_steps()
        for step in steps:
            reader.trajectories(step)
        metrics, _events, _config = reader.metrics(), reader.events(), reader.config()
        return {"state": status["state"], "metrics": [r["step"] for r in metrics], "parts": steps,
                "warnings": reader.warnings, "shown": shown(reader)}

    def inspector(run: Path) -> dict[str, Any]:
        insp = TrajectoryInspector(run, static=True, auto_refresh=0)
        try:
            for step in insp.steps:
                insp.show_step(step)
            return {"steps": insp.steps, "warnings": list(insp.warnings), "shown": shown(insp)}
        finally:
            insp.close()

    def listed() -> dict[str, Any]:
        runs = list_runs(root)
        return {"rows": {s.run_id: [s.state, list(s.warnings)] for s in runs}, "warnings": runs.warnings,
                "shown": shown(runs)}

    attempt("list_runs", listed)
    for name in ("healthy", *LOCKED):
        run = Path(root) / name
        attempt(f"reader {name}", lambda run=run: everything(run))
        attempt(f"open_run {name}", lambda run=run: shown(open_run(run)), raises=RunUnreadable)
        attempt(f"inspector {name}", lambda run=run: inspector(run))

    def no_cluster(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("looking at a run must not start a cluster")

    local_mod._start_head = no_cluster
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "skyrl_nb")
    shell.run_line_magic("config", f"SkyrlMagics.run_root = {root!r}")
    shell.magics_manager.registry["SkyrlMagics"].show_dashboard = False
    attempt("%skyrl list", lambda: shown(shell.run_line_magic("skyrl", "list")))
    for name in ("healthy", *LOCKED):
        for command in ("status", "dashboard", "inspect", "logs"):
            attempt(f"%skyrl {command} {name}",
                    lambda line=f"{command} {name}": shown(shell.run_line_magic("skyrl", line)))
    import gc

    gc.collect()
    return json.loads(json.dumps(out, default=str))


def test_another_users_folders_are_named_and_hide_nothing(tmp_path_factory: pytest.TempPathFactory) -> None:
    """A run root on a shared disk where some folders and files belong to another user (mode 0700 / 0600): every
    reader and `%skyrl list|status|dashboard|inspect|logs` run as a user who cannot read them (``nobody``,
    since root reads everything; the owner itself with modes 000 when not root). No traceback; each run that
    cannot be read is named, once, with the reason; every readable run and step is still shown."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    root_user = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="skyrl-locked-", dir="/tmp"))  # world-traversable, unlike tmp_path
    try:
        runs = _locked_root(base, 0o700 if root_user else 0o000, 0o600 if root_user else 0o000)
        home = base / "home"
        home.mkdir()
        env = {**os.environ, "HOME": str(home), "IPYTHONDIR": str(home / "ipython"), "SKYRL_NB_STATIC": "1",
               "SKYRL_NB_CONFIG_DIR": str(home / "config"), "SKYRL_NB_CACHE_DIR": str(home / "cache"),
               "MPLCONFIGDIR": str(home / "mpl"), "PYTHONDONTWRITEBYTECODE": "1"}
        command = [sys.executable, __file__, str(runs)]
        if root_user:  # setpriv execs with root's rights to reach the interpreter (often under /root), then runs
            # as nobody with none
            setpriv = shutil.which("setpriv")
            if setpriv is None:
                pytest.skip("running as root without setpriv (util-linux): cannot read as another user")
            os.chown(home, NOBODY, NOBODY)
            command = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=180)
        if root_user and proc.returncode != 0 and "setpriv:" in proc.stderr:
            pytest.skip(f"cannot run a process as another user here: {proc.stderr.strip()[:200]}")
        assert proc.returncode == 0, proc.stderr[-3000:]
        got = json.loads(proc.stdout.strip().splitlines()[-1])
    finally:
        for path in [base, *base.rglob("*")]:
            if not path.is_symlink():
                path.chmod(0o700)
        shutil.rmtree(base, ignore_errors=True)

    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr[-3000:]
    assert got.pop("unraisable") == []
    tracebacks = {key: r["traceback"] for key, r in got.items() if "traceback" in r}
    assert not tracebacks, tracebacks
    usage = {key: r["usage"] for key, r in got.items() if "usage" in r}
    assert all("\n" not in line for line in usage.values()), usage
    denied = "cannot be read (permission denied for this user)"

    listed = got["list_runs"]["value"]
    assert listed["rows"]["healthy"] == ["succeeded", []]
    assert set(listed["rows"]) == {"healthy", *LOCKED}  # every run is still listed
    assert listed["rows"]["private"] == ["unreadable", [f"private {denied}; skipped"]]
    assert listed["rows"]["private-logs"][0] == "damaged"
    assert listed["warnings"] == ["loop cannot be read (a symbolic-link loop); skipped"]
    shown_list = got["%skyrl list"]["value"]
    assert "unreadable" in shown_list and "symbolic-link loop" in shown_list and "healthy" in shown_list

    for name in ("healthy", "private-trajectories", "private-logs", "private-part"):
        reader = got[f"reader {name}"]["value"]
        assert reader["metrics"] == ([] if name == "private-logs" else [1, 2, 3][: 2 if name == "healthy" else 3])
        expected_parts = {"healthy": [1, 2], "private-trajectories": []}.get(name, [1, 2, 3])
        assert reader["parts"] == expected_parts
        assert got[f"inspector {name}"]["value"]["steps"] == expected_parts
    assert got["reader healthy"]["value"]["warnings"] == []
    assert got["reader private-trajectories"]["value"]["warnings"] == [f"trajectories {denied}; skipped"]
    assert [w for w in got["inspector private-trajectories"]["value"]["warnings"] if denied in w]
    logs = got["reader private-logs"]["value"]
    assert logs["state"] == "damaged" and len(logs["warnings"]) == 3
    assert all(any(w.startswith(f"{f} {denied}") for w in logs["warnings"])
               for f in ("status.json", "metrics.jsonl", "events.jsonl")), logs["warnings"]
    part = "trajectories/step_000002.parquet is not a readable Parquet file (permission denied for this user)"
    assert got["reader private-part"]["value"]["warnings"] == [f"{part}; skipped"]
    assert [w for w in got["inspector private-part"]["value"]["warnings"] if part in w]

    # the folder nobody may read: open_run and the commands that open one run say so in one line
    assert got["open_run private"]["usage"].startswith("RunUnreadable: run: ")
    for key in ("open_run private", "%skyrl status private", "%skyrl dashboard private", "%skyrl inspect private"):
        said = got[key].get("usage") or got[key].get("value", "")
        assert "private" in said and "permission denied for this user" in said, (key, got[key])
    assert "private" in got["%skyrl logs private"]["usage"]  # no job: one line
    for name in ("healthy", "private-trajectories", "private-logs", "private-part"):
        assert "value" in got[f"%skyrl status {name}"] and "value" in got[f"%skyrl dashboard {name}"]


if __name__ == "__main__":  # the child of test_another_users_folders_are_named_and_hide_nothing
    import json
    import sys

    print(json.dumps(_read_as_this_user(sys.argv[1])))
