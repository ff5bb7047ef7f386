"""The run store: what the engine writes while it trains and what notebooks read, live or later.

Layout of one run (``<run_root>/<run_id>/``)::

    config.yaml        the resolved config
    status.json        state, step, total_steps, heartbeat, error
    metrics.jsonl      one object per step ("step" counted from 1, SkyRL metric names)
    events.jsonl       lifecycle: started, resumed, checkpoint_saved, eval, warning, error, finished
    trajectories/      step_000001.parquet, ... one part per step, a row per sample
    checkpoints/       SkyRL layout (written by the engine)

Writers append and flush per step and replace whole files atomically (temp file + rename). Readers
tail by byte offset, ignore a torn last line and never hold the whole history in memory. pandas and
pyarrow are imported only by the functions that need them.

Readers survive damaged files (a disk that filled up, a copy cut short, a hand edit): a status.json
that is not a JSON object shows the run as ``damaged``, a metrics or events line that is not a JSON
object and a trajectory part that is not Parquet are skipped; each is reported once, as a line in
``RunReader.warnings``, and never raised.
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from skyrl_core.choices import FINAL_STATES, RunState, values
from skyrl_core.registry import shown

STATES = values(RunState)
REWARD_KEY = "reward/avg_raw_reward"
PART_RE = re.compile(r"^step_(\d{6,})\.parquet$")
"""A complete trajectory part's file name; its group is the step."""
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
"""A run id: letters, digits, '.', '_' or '-', at most 100, not starting with a punctuation mark."""
_RUN_ID_RE = re.compile(RUN_ID_PATTERN)

#: A running job whose heartbeat is older than this (seconds) is reported as lost.
HEARTBEAT_STALE_S = 120.0

DAMAGED = "damaged"
"""The state readers show for a run whose status.json cannot be read (not UTF-8, not JSON, not an
object, or an unknown state); its metrics and trajectories are still read. Like ``lost`` it is the
readers' word: the engine never writes it."""


def part_name(step: int) -> str:
    """The file name of step ``step``'s trajectory part: ``step_000007.parquet``."""
    return f"step_{step:06d}.parquet"


def part_step(name: str) -> int | None:
    """The step of a complete trajectory part's file name, None for anything else (temp files...)."""
    m = PART_RE.match(name)
    return int(m.group(1)) if m else None


def run_id_problem(run_id: object) -> str | None:
    """The one-line problem with a run id, or None when it is valid (see ``RUN_ID_PATTERN``)."""
    if isinstance(run_id, str) and _RUN_ID_RE.match(run_id):
        return None
    return (f"run.run_id: {run_id!r} is not a valid run id; use letters, digits, '.', '_' or '-' "
            "(at most 100, starting with a letter or digit)")


def run_root_problem(run_root: object, *, key: str = "run.run_root", check_files: bool = True) -> str | None:
    """The one-line problem with a folder runs are written under, or None when launch can use it.

    The rule for ``run.run_root`` (and ``trainer.ckpt_path``): text without NUL bytes, absolute once
    ``~`` is expanded (the job runs in another working directory, maybe on another machine); with
    ``check_files``, not a file, and its nearest existing folder one this process may write in (launch
    writes the run's config and status there before submitting).

    >>> run_root_problem("runs")
    "run.run_root: 'runs' must be an absolute path the cluster can see (e.g. ~/skyrl-runs)"
    """
    rule = "must be an absolute path the cluster can see (e.g. ~/skyrl-runs)"
    if not isinstance(run_root, str) or not run_root.strip():
        return f"{key}: {shown(run_root)} is not allowed; it {rule}"
    if "\x00" in run_root:
        return f"{key}: {shown(run_root)} contains a NUL byte; it {rule}"
    path = Path(os.path.expanduser(run_root))
    if not path.is_absolute():
        return f"{key}: {shown(run_root)} {rule}"
    if not check_files:
        return None
    existing = path
    while not os.path.exists(existing) and existing != existing.parent:
        existing = existing.parent
    if not os.path.isdir(existing):
        which = "it is" if existing == path else f"{shown(str(existing))} is"
        return f"{key}: {shown(run_root)} is not allowed: {which} a file, not a folder"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{key}: {shown(run_root)} is not allowed: this user cannot write in {shown(str(existing))}"
    return None


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace ``path`` with ``text`` atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    # pid and thread in the name: a heartbeat thread and the main loop may both write status.json
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    with tmp.open("w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return path


def _new_status() -> dict[str, Any]:
    return {"state": RunState.PENDING.value, "step": 0, "total_steps": None, "heartbeat": None,
            "started_at": None, "ended_at": None, "error": None, "pid": None}


class DamagedFile(ValueError):
    """A run-store file that cannot be read as what it should be; the message is one line naming it."""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# status.json's fields and what each must hold (None is always allowed)
_STATUS_FIELDS: dict[str, Any] = {
    "state": lambda v: v in STATES, "step": _is_count, "total_steps": _is_count, "heartbeat": _is_number,
    "started_at": _is_number, "ended_at": _is_number, "error": lambda v: isinstance(v, str), "pid": _is_count,
}


def _json_object(data: bytes) -> tuple[dict[str, Any] | None, str | None]:
    """``(object, None)`` for bytes holding one JSON object, else ``(None, what is wrong)``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, f"is not UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start})"
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # JSONDecodeError, or a number too long to read
        return None, "is not JSON" if text.strip() else "is empty"
    if not isinstance(value, dict):
        return None, f"is JSON but not an object ({shown(value)})"
    return value, None


def _read_status(path: Path) -> tuple[dict[str, Any] | None, list[str]]:
    """``(status, problems)``: None when status.json is missing or damaged (problems say which); a field
    holding the wrong kind of value is reset to its default, with a problem line."""
    try:
        raw, why = _json_object(path.read_bytes())
    except FileNotFoundError:
        return None, []
    except OSError as err:
        raw, why = None, f"cannot be read ({err.strerror or err})"
    if raw is None:
        return None, [f"status.json {why}"]
    status, problems = _new_status(), []
    for name, value in raw.items():
        allowed = _STATUS_FIELDS.get(name)
        if value is None or allowed is None or allowed(value):
            status[name] = value
        else:
            problems.append(f"status.json: {name} = {shown(value)} is not allowed; ignored")
    return status, problems


def _json_default(value: Any) -> Any:
    # numpy scalars / arrays and Paths reach the writer from the engine
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def _clean_number(value: Any) -> Any:
    # JSON has no NaN/inf; keep lines parseable by any reader
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


# ---------------------------------------------------------------------------------- writer
class RunWriter:
    """Writes one run directory. Used by the engine; safe to re-open when a run resumes."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.run_dir = Path(run_dir).expanduser()
        self.trajectory_dir = self.run_dir / "trajectories"
        self.trajectory_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "checkpoints").mkdir(exist_ok=True)
        status, problems = _read_status(self.run_dir / "status.json")
        self._status: dict[str, Any] = status or _new_status()
        #: what was wrong with the files found here (also logged as ``warning`` events)
        self.warnings: list[str] = []
        for problem in problems:
            self._warn(problem + ("" if status else "; starting a fresh status"))

    def write_config(self, config: Any) -> Path:
        """Save the resolved config (a JobConfig or a plain dict) as config.yaml."""
        data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        path = self.run_dir / "config.yaml"
        atomic_write_text(path, yaml.safe_dump(data, sort_keys=False))
        return path

    def set_status(self, state: str | None = None, **fields: Any) -> dict[str, Any]:
        """Update status.json (atomic rewrite); the heartbeat is always refreshed."""
        if state is not None:
            if state not in STATES:
                raise ValueError(f"state: {state!r} is not allowed; allowed: {', '.join(STATES)}")
            state = RunState(state).value
            self._status["state"] = state
            if state == "running" and not self._status.get("started_at"):
                self._status["started_at"] = time.time()
            if state in FINAL_STATES:
                self._status["ended_at"] = time.time()
            elif state == "running":
                self._status["ended_at"] = None
                self._status["error"] = None
        unknown = set(fields) - {"step", "total_steps", "error", "pid"}
        if unknown:
            raise ValueError(f"status field(s) {sorted(unknown)} are not allowed; allowed: step, total_steps, error, pid")
        self._status.update(fields)
        self._status["heartbeat"] = time.time()
        atomic_write_text(self.run_dir / "status.json", json.dumps(self._status))
        return dict(self._status)

    def reset(self) -> None:
        """Start the run over: forget metrics, events, trajectories and status (checkpoints are kept)."""
        for name in ("metrics.jsonl", "events.jsonl", "status.json"):
            (self.run_dir / name).unlink(missing_ok=True)
        for part in self.trajectory_dir.iterdir():
            part.unlink(missing_ok=True)
        self._status = _new_status()

    def heartbeat(self) -> None:
        self.set_status()

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """Append one line for ``step`` (counted from 1) to metrics.jsonl and flush it."""
        row = {"step": int(step), "time": time.time()}
        row.update({k: _clean_number(v) for k, v in metrics.items() if k not in ("step", "time")})
        self._append(self.run_dir / "metrics.jsonl", row)

    def log_event(self, kind: str, **data: Any) -> None:
        """Append a lifecycle event (started, checkpoint_saved, eval, warning, error, ...)."""
        self._append(self.run_dir / "events.jsonl", {"time": time.time(), "kind": kind, **data})

    def write_trajectories(self, step: int, rows: list[dict[str, Any]] | Any) -> Path:
        """Write one Parquet part for ``step`` atomically; rows is a list of dicts or a pyarrow Table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows))
        path = self.trajectory_dir / part_name(step)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        return path

    def truncate_after(self, step: int) -> None:
        """Forget everything logged after ``step``: used when a run resumes from a checkpoint.

        Kept lines stay byte for byte (a reader knows them by step and time, see ``RunReader.poll``);
        lines that are not JSON objects (a torn line from a killed writer, damage) are dropped, and
        the drop is logged as a ``warning`` event.
        """
        dropped = []
        for name in ("metrics.jsonl", "events.jsonl"):
            path = self.run_dir / name
            try:
                lines = path.read_bytes().split(b"\n")
            except FileNotFoundError:
                continue
            kept, bad = [], 0
            for line in lines:
                if not line.strip():
                    continue
                row, _why = _json_object(line)
                # events without a step (started, error, ...) are history worth keeping; a metric row needs one
                row_step = None if row is None else row.get("step")
                if row is None or (name == "metrics.jsonl" and not _is_count(row_step)):
                    bad += 1
                elif not _is_count(row_step) or row_step <= step:
                    kept.append(line.decode("utf-8") + "\n")
            atomic_write_text(path, "".join(kept))
            if bad:
                dropped.append(f"{name}: {bad} damaged line(s) dropped by the resume")
        for part in self.trajectory_dir.iterdir():
            part_of = part_step(part.name)
            if (part_of is not None and part_of > step) or part.name.endswith(".tmp"):
                part.unlink(missing_ok=True)
        self._status["step"] = step
        for problem in dropped:
            self._warn(problem)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.log_event("warning", message=message)

    def _append(self, path: Path, row: dict[str, Any]) -> None:
        line = json.dumps(row, default=_json_default)
        with path.open("a") as f:
            f.write(line + "\n")
            f.flush()


# ---------------------------------------------------------------------------------- reader
class _Tail:
    """Reads complete new lines of a growing JSONL file from a remembered byte offset.

    A line that is not a JSON object (or, with ``need_step``, has no step) is skipped and reported
    through ``warn``. A rewrite (a resume's ``truncate_after``: a new inode or a shorter file) is read
    again from the start, skipping rows already returned, known by their ``(step, time)``: a kept row
    is never returned twice. Rows a resume writes for steps returned before are new data (the steps
    were trained again) and are returned; readers let a step's later row replace its earlier one, as
    ``skyrl_nb.dashboard.RunSeries`` does.
    """

    def __init__(self, path: Path, warn: Callable[[str], None], *, need_step: bool = False):
        self.path = path
        self.offset = 0
        self._inode: int | None = None
        self._line = 0  # lines read so far, for messages
        self._returned: set[tuple[Any, float]] = set()
        self._warn = warn
        self._need_step = need_step

    def read_new(self) -> list[dict[str, Any]]:
        try:
            st = self.path.stat()
            if self._inode is not None and (st.st_ino != self._inode or st.st_size < self.offset):
                self.offset, self._line = 0, 0  # the file was rewritten (a resume truncated it)
            self._inode = st.st_ino
            if st.st_size == self.offset:
                return []
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read(st.st_size - self.offset)
        except FileNotFoundError:
            return []
        except OSError as err:
            self._warn(f"{self.path.name} cannot be read ({err.strerror or err}); skipped")
            return []
        end = chunk.rfind(b"\n")
        if end < 0:
            return []  # only a torn (still being written) line so far
        self.offset += end + 1
        rows = []
        for line in chunk[:end].split(b"\n"):
            self._line += 1
            if not line.strip():
                continue
            row, why = _json_object(line)
            if row is None or (self._need_step and not _is_count(row.get("step"))):
                why = why or f"has no step ({shown(row.get('step') if row else None)})"
                self._warn(f"{self.path.name} line {self._line} {why}; skipped")
                continue
            step, stamp = row.get("step"), row.get("time")
            if _is_number(stamp) and (step is None or _is_count(step)):
                if (step, stamp) in self._returned:
                    continue
                self._returned.add((step, stamp))
            rows.append(row)
        return rows


class RunReader:
    """Reads one run directory, incrementally. ``poll()`` returns only rows written since the last call.

    Damaged files never raise: what was skipped is in ``warnings``, one line each, reported once.

    >>> run = RunReader("~/skyrl-runs/my-run")      # doctest: +SKIP
    >>> run.status()["state"], len(run.metrics())    # doctest: +SKIP
    """

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.run_dir = Path(run_dir).expanduser()
        #: one line per damaged file or line skipped so far (``status.json is not JSON; ...``)
        self.warnings: list[str] = []
        self._metrics_tail = self._tail("metrics.jsonl")
        self._events_tail = self._tail("events.jsonl")

    def _tail(self, name: str) -> _Tail:
        return _Tail(self.run_dir / name, self._warn, need_step=name == "metrics.jsonl")

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def exists(self) -> bool:
        return (self.run_dir / "status.json").exists() or (self.run_dir / "config.yaml").exists()

    def config(self) -> dict[str, Any]:
        """config.yaml as a dict; ``{}`` (and a warning) when it is missing or damaged."""
        path = self.run_dir / "config.yaml"
        try:
            data = yaml.safe_load(path.read_bytes().decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, yaml.YAMLError, RecursionError) as err:
            self._warn(f"config.yaml cannot be read ({type(err).__name__}); skipped")
            return {}
        if not isinstance(data, dict):
            self._warn(f"config.yaml is not a mapping ({shown(data)}); skipped")
            return {}
        return data

    def status(self) -> dict[str, Any]:
        """status.json, with ``lost: True`` added when a running job's heartbeat went stale.

        A status.json that cannot be read gives state ``damaged`` (``DAMAGED``); ``warnings`` says why.
        """
        status, problems = _read_status(self.run_dir / "status.json")
        for problem in problems:
            self._warn(problem + ("; skipped" if status else f"; the run is shown as {DAMAGED}"))
        if status is None:
            status = _new_status()
            if problems:
                status["state"] = DAMAGED
        beat = status.get("heartbeat")
        status["lost"] = bool(status.get("state") == "running" and beat and time.time() - beat > HEARTBEAT_STALE_S)
        return status

    def poll(self) -> list[dict[str, Any]]:
        """New metric rows since the previous poll (a torn last line is left for next time).

        After a resume rewrote metrics.jsonl, rows returned before are not returned again; rows for
        steps the resume trained again are (see ``_Tail``).
        """
        return self._metrics_tail.read_new()

    def poll_events(self) -> list[dict[str, Any]]:
        return self._events_tail.read_new()

    def metrics(self) -> list[dict[str, Any]]:
        """Every metric row, re-read from disk."""
        return self._tail("metrics.jsonl").read_new()

    def events(self) -> list[dict[str, Any]]:
        return self._tail("events.jsonl").read_new()

    def metrics_frame(self):
        """All metric rows as a pandas DataFrame indexed by step."""
        import pandas as pd

        frame = pd.DataFrame(self.metrics())
        return frame.set_index("step", drop=False) if "step" in frame else frame

    def trajectory_steps(self) -> list[int]:
        """Steps that have a complete trajectory part, in order."""
        folder = self.run_dir / "trajectories"
        if not folder.is_dir():
            return []
        return sorted(step for p in os.scandir(folder) if (step := part_step(p.name)) is not None)

    def trajectory_path(self, step: int) -> Path:
        return self.run_dir / "trajectories" / part_name(step)

    def trajectories(self, step: int, columns: Iterable[str] | None = None):
        """The rows of one step's part as a DataFrame (only ``columns`` when given).

        FileNotFoundError when the step has no part; an empty frame (and a warning) when it is damaged.
        """
        import pandas as pd

        path = self.trajectory_path(step)
        if not path.exists():
            raise FileNotFoundError(f"step {step}: no trajectory part at {path}; "
                                    f"steps with parts: {_span(self.trajectory_steps())}")
        try:
            return read_part(path, columns).to_pandas()
        except DamagedFile as err:
            self._warn(f"{err}; skipped")
            return pd.DataFrame()

    def summary(self) -> RunSummary:
        status = self.status()
        last: dict[str, Any] = {}
        for row in self.metrics()[-1:]:
            last = row
        reward = last.get(REWARD_KEY)
        return RunSummary(
            run_id=self.run_id,
            path=str(self.run_dir),
            state="lost" if status.get("lost") else status.get("state", "pending"),
            step=int(status.get("step") or last.get("step") or 0),
            total_steps=status.get("total_steps"),
            last_reward=reward if _is_number(reward) else None,
            error=status.get("error"),
            started_at=status.get("started_at"),
            warnings=tuple(self.warnings),
        )

    def export(self, path: str | os.PathLike[str], step: int | None = None) -> Any:
        """Write checkpoint ``step`` (default: the latest) as a Hugging Face model directory at ``path`` (a new
        local directory or ``s3://bucket/prefix``); returns the ``ExportResult``. See ``skyrl_engine.export``.

        Runs here, in this process: it needs the engine installed where the run directory is readable (the
        engine is imported on the first call only, so reading runs stays light).

        >>> open_run("~/skyrl-runs/my-run").export("~/models/my-run")     # doctest: +SKIP
        """
        try:
            from skyrl_engine.export import export_model
        except ImportError as err:
            raise RuntimeError(f"export needs the engine (pip install 'skyrl-nb[engine]'): {err}") from None
        return export_model(self.run_dir, path, step=step)

    def __repr__(self) -> str:
        s = self.summary()
        return f"RunReader({s.run_id!r}, state={s.state}, step={s.step}/{s.total_steps}, path={s.path!r})"

    def _repr_html_(self) -> str:
        return self.summary()._repr_html_()


def read_part(path: str | os.PathLike[str], columns: Iterable[str] | None = None):
    """One trajectory part as a pyarrow Table, with only those of ``columns`` it has (all when None).

    FileNotFoundError when it is missing; :class:`DamagedFile` (one line naming it) when it is not a
    readable Parquet file (0 bytes, cut short, overwritten).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        part = pq.ParquetFile(path)
        names = part.schema_arrow.names
        return part.read(columns=None if columns is None else [c for c in columns if c in names])
    except FileNotFoundError:
        raise
    except (OSError, ValueError, pa.ArrowException) as err:
        reason = " ".join(str(err).split())[:100] or type(err).__name__
        raise DamagedFile(f"trajectories/{path.name} is not a readable Parquet file ({reason})") from None


@dataclass(frozen=True)
class RunSummary:
    """One line about a run: what ``list_runs`` returns."""

    run_id: str
    path: str
    state: str
    step: int
    total_steps: int | None
    last_reward: float | None
    error: str | None = None
    started_at: float | None = None
    warnings: tuple[str, ...] = ()
    """What the reader skipped (damaged files or lines), one line each."""

    def __str__(self) -> str:
        reward = "-" if self.last_reward is None else f"{self.last_reward:.3f}"
        skipped = f"  ({len(self.warnings)} skipped: {self.warnings[0][:80]})" if self.warnings else ""
        return (f"{self.run_id:<28} {self.state:<10} {self.step:>5}/{self.total_steps or '?':<5} "
                f"reward {reward}{skipped}")

    def _repr_html_(self) -> str:
        colour = {"running": "#1f77b4", "succeeded": "#2ca02c", "failed": "#d62728",
                  "stopped": "#7f7f7f", "lost": "#ff7f0e", DAMAGED: "#8c564b"}.get(self.state, "#555")
        reward = "-" if self.last_reward is None else f"{self.last_reward:.3f}"
        err = f"<br><small>{html.escape(self.error.splitlines()[-1])}</small>" if self.error else ""
        err += "".join(f"<br><small>skipped: {html.escape(w)}</small>" for w in self.warnings[:3])
        return (f"<div><b>{html.escape(self.run_id)}</b> <span style='color:{colour}'>{self.state}</span> "
                f"step {self.step}/{self.total_steps or '?'} &middot; reward {reward}{err}</div>")


class RunList(list):
    """A list of RunSummary that prints as a table."""

    def __str__(self) -> str:
        return "\n".join(str(s) for s in self) if self else "(no runs)"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        if not self:
            return "<i>no runs</i>"
        rows = "".join(
            f"<tr><td>{html.escape(s.run_id)}</td><td>{s.state}</td><td>{s.step}/{s.total_steps or '?'}</td>"
            f"<td>{'-' if s.last_reward is None else f'{s.last_reward:.3f}'}</td></tr>" for s in self)
        return ("<table><tr><th>run</th><th>state</th><th>step</th><th>last reward</th></tr>"
                f"{rows}</table>")


def open_run(path: str | os.PathLike[str]) -> RunReader:
    """Open a run directory (finished or running). Raises if it holds no run."""
    reader = RunReader(path)
    if not reader.exists():
        raise FileNotFoundError(f"run: {str(path)!r} is not a run directory (no status.json or config.yaml)")
    return reader


# ``skyrl_nb.runs.open(path)`` as the issue spells it
open = open_run  # noqa: A001


def list_runs(run_root: str | os.PathLike[str] = "~/skyrl-runs") -> RunList:
    """Every run under ``run_root``, newest first, with state, steps and last reward.

    A run with damaged files is listed with what could be read: state ``damaged`` when its status.json
    cannot be read, and what was skipped in its ``warnings``.
    """
    root = Path(run_root).expanduser()
    if not root.is_dir():
        return RunList()
    readers = [RunReader(p) for p in root.iterdir() if p.is_dir()]
    summaries = [r.summary() for r in readers if r.exists()]
    summaries.sort(key=lambda s: s.started_at or 0, reverse=True)
    return RunList(summaries)


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]} ({len(steps)})"
