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

The run root may also be an object store (``s3://bucket/prefix``, any fsspec URL; ``skyrl_core.store``).
Object stores have no append and no rename, so there the logs are rolled segments,
``metrics.<generation>-<segment>.jsonl`` (and ``events.…``): the writer rewrites the open segment whole
with each line (one PUT, atomic by itself) and starts the next one past ``SEGMENT_BYTES``; a resume's
truncation writes the kept lines as the next generation, then deletes the old one. A reader lists the
run folder once per refresh (one request: sizes and ETags of status.json and every segment), then reads
only what grew, by byte range, and status.json only when its ETag changed: a few requests per refresh,
however long the run.

Readers survive damaged files (a disk that filled up, a copy cut short, a hand edit): a status.json
that is not a JSON object shows the run as ``damaged``, a metrics or events line that is not a JSON
object and a trajectory part that is not Parquet (or not a trajectory part's schema) are skipped; each is
reported once, as a line in ``RunReader.warnings``, and never raised. Silent damage is named too: a run with
files but no status.json shows as ``no_status``; NUL bytes in a log are named with their byte offset and the
lines around them still read; a torn last line of a run that has ended, a step missing between two others
and a line out of step order are warnings, and metric rows come back in step order. Anything a reader
cannot read at all (another user's folder, a symbolic-link loop, ``trajectories`` that is a file) is
skipped and named, and the rest is shown: ``list_runs`` lists such a run as ``unreadable``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from skyrl_core.choices import FINAL_STATES, ReadState, RunState, values
from skyrl_core.exports import ExportError, ExportResult
from skyrl_core.registry import shown
from skyrl_core.store import Entry, LocalStore, Store, is_url, join, open_store, os_reason, url_problem

STATES = values(RunState)
REWARD_KEY = "reward/avg_raw_reward"
PART_RE = re.compile(r"^step_(\d{6,})\.parquet$")
"""A complete trajectory part's file name; its group is the step."""
RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
"""A run id: letters, digits, '.', '_' or '-', at most 100, not starting with a punctuation mark."""
_RUN_ID_RE = re.compile(RUN_ID_PATTERN)

#: A running job whose heartbeat is older than this (seconds) is reported as lost.
HEARTBEAT_STALE_S = 120.0

DAMAGED = ReadState.DAMAGED.value
"""The state readers show for a run whose status.json cannot be read (not UTF-8, not JSON, not an
object, or an unknown state); its metrics and trajectories are still read. Like ``lost`` it is the
readers' word: the engine never writes it."""


#: "reward first -> last" averages this many steps at each end at most (a quarter of the run for short
#: runs, at least one): a single step's reward is noisy. The demo, the notebook and the dashboard all use
#: :func:`reward_change`.
REWARD_WINDOW = 20


@dataclass(frozen=True)
class RewardChange:
    """The mean ``reward/avg_raw_reward`` of a run's first and of its last ``window`` steps (None: no reward)."""

    first: float | None
    last: float | None
    window: int
    steps: int

    @property
    def gain(self) -> float | None:
        return None if self.first is None or self.last is None else self.last - self.first

    def averaged(self) -> str:
        """What the two figures average, in words."""
        return "first and last step" if self.window == 1 else f"means of the first and last {self.window} steps"

    def __str__(self) -> str:
        if self.first is None or self.last is None:
            return "no reward yet"
        return f"{self.first:.3f} -> {self.last:.3f} ({self.gain:+.3f}; {self.averaged()} of {self.steps})"

    def _repr_html_(self) -> str:
        return f"<span>reward {html.escape(str(self))}</span>"


def reward_change(rewards: Iterable[float | None], window: int = REWARD_WINDOW) -> RewardChange:
    """"Reward first -> last" the one way: the mean of the first and of the last ``k`` rewards, ``k`` =
    ``min(window, steps // 4)``, at least 1 (missing rewards skipped).

    >>> str(reward_change([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8]))
    '0.150 -> 0.750 (+0.600; means of the first and last 2 steps of 8)'
    """
    values = [float(r) for r in rewards if _is_number(r)]
    if not values:
        return RewardChange(None, None, 0, 0)
    k = max(1, min(window, len(values) // 4))
    return RewardChange(sum(values[:k]) / k, sum(values[-k:]) / k, k, len(values))


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

    The rule for ``run.run_root`` (and ``trainer.ckpt_path``): text without NUL bytes, either an
    object-store URL (``s3://bucket/prefix``: a scheme fsspec knows, with a bucket; with ``check_files``
    its package importable here) or a path absolute once ``~`` is expanded (the job runs in another
    working directory, maybe on another machine); with ``check_files``, not a file, and its nearest
    existing folder one this process may write in (launch writes the run's config and status there
    before submitting).

    >>> run_root_problem("runs")
    "run.run_root: 'runs' must be an absolute path the cluster can see (e.g. ~/skyrl-runs) or s3://bucket/prefix"
    """
    rule = "must be an absolute path the cluster can see (e.g. ~/skyrl-runs) or s3://bucket/prefix"
    if not isinstance(run_root, str) or not run_root.strip():
        return f"{key}: {shown(run_root)} is not allowed; it {rule}"
    if "\x00" in run_root:
        return f"{key}: {shown(run_root)} contains a NUL byte; it {rule}"
    if is_url(run_root):
        return url_problem(run_root, key, check_files=check_files)
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


def run_dir_of(run_root: str, run_id: str) -> Path | str:
    """``<run_root>/<run_id>``: a Path (``~`` expanded) for a local root, a URL string for an object store."""
    return join(run_root, run_id)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Replace ``path`` with ``text`` atomically (temp file in the same folder, fsync, rename)."""
    path = Path(path)
    LocalStore(path.parent).put(path.name, text.encode())
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


def _read_status(store: Store, data: bytes | None = None) -> tuple[dict[str, Any] | None, list[str]]:
    """``(status, problems)``: None when status.json is missing or damaged (problems say which); a field
    holding the wrong kind of value is reset to its default, with a problem line. ``data``: its bytes,
    when the caller has them."""
    try:
        raw, why = _json_object(store.read("status.json") if data is None else data)
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


# ---------------------------------------------------------------------------------- logs
#: An object-store log segment is closed once it holds this many bytes; the writer then starts the next.
SEGMENT_BYTES = 256 * 1024
_SEGMENT_RE = re.compile(r"^(metrics|events)\.(\d{4,})-(\d{6,})\.jsonl$")
#: How long (s) the listing of an object-store run folder that ``poll()`` made answers the
#: ``poll_events()`` and ``status()`` calls after it. ``poll()`` itself always lists anew. A dashboard's
#: refresh holds one listing however long its reads take (``RunReader.one_listing``).
LISTING_TTL_S = 0.2


def segment_name(stem: str, generation: int, segment: int) -> str:
    """An object-store log segment's name: ``metrics.0000-000003.jsonl``."""
    return f"{stem}.{generation:04d}-{segment:06d}.jsonl"


def _segments(listing: dict[str, Entry], stem: str) -> tuple[int | None, list[tuple[int, str, Entry]]]:
    """``(newest generation, [(segment, name, entry), ...] of it in order)`` from a run folder's listing."""
    found: dict[int, list[tuple[int, str, Entry]]] = {}
    for name, entry in listing.items():
        m = _SEGMENT_RE.match(name)
        if m and m.group(1) == stem:
            found.setdefault(int(m.group(2)), []).append((int(m.group(3)), name, entry))
    if not found:
        return None, []
    newest = max(found)
    return newest, sorted(found[newest])


class _FileLog:
    """A log on a local disk: one JSONL file, appended to and flushed line by line."""

    def __init__(self, store: LocalStore, stem: str):
        self.store, self.name = store, f"{stem}.jsonl"

    def append(self, data: bytes) -> None:
        self.store.append(self.name, data)

    def read_all(self) -> bytes:
        return self.store.read(self.name)

    def rewrite(self, data: bytes) -> None:
        self.store.put(self.name, data)

    def delete(self) -> None:
        self.store.delete(self.name)


class _SegmentLog:
    """A log on an object store (no appends there): rolled segments, each rewritten whole per line."""

    def __init__(self, store: Store, stem: str):
        self.store, self.stem = store, stem
        self._loaded = False
        self.generation, self.segment, self.buffer = 0, 0, b""

    def _load(self) -> None:
        """Continue where a previous writer of this run stopped (a resume): its newest segment."""
        if self._loaded:
            return
        self._loaded = True
        generation, segments = _segments(self.store.list(), self.stem)
        if generation is None:
            return
        self.generation = generation
        self.segment, name, _ = segments[-1]
        self.buffer = self.store.read(name)
        if len(self.buffer) >= SEGMENT_BYTES:
            self.segment, self.buffer = self.segment + 1, b""

    def append(self, data: bytes) -> None:
        self._load()
        self.buffer += data
        self.store.put(segment_name(self.stem, self.generation, self.segment), self.buffer)
        if len(self.buffer) >= SEGMENT_BYTES:
            self.segment, self.buffer = self.segment + 1, b""

    def read_all(self) -> bytes:
        _, segments = _segments(self.store.list(), self.stem)
        if not segments:
            raise FileNotFoundError(f"{self.store.path(self.stem)}.*.jsonl")
        return b"".join(self.store.read(name) for _, name, _ in segments)

    def rewrite(self, data: bytes) -> None:
        """Write ``data`` as the next generation, then delete the older ones (readers follow the newest)."""
        self._load()
        old = [n for n in self.store.list() if (m := _SEGMENT_RE.match(n)) and m.group(1) == self.stem]
        self.generation, self.segment, self.buffer = self.generation + 1, 0, b""
        lines = data.splitlines(keepends=True)
        for i, line in enumerate(lines):
            self.buffer += line
            if len(self.buffer) >= SEGMENT_BYTES or i == len(lines) - 1:
                self.store.put(segment_name(self.stem, self.generation, self.segment), self.buffer)
                if len(self.buffer) >= SEGMENT_BYTES:
                    self.segment, self.buffer = self.segment + 1, b""
        for name in old:
            self.store.delete(name)

    def delete(self) -> None:
        for name in self.store.list():
            m = _SEGMENT_RE.match(name)
            if m and m.group(1) == self.stem:
                self.store.delete(name)
        self.generation, self.segment, self.buffer, self._loaded = 0, 0, b"", True


def _log(store: Store, stem: str) -> _FileLog | _SegmentLog:
    return _FileLog(store, stem) if isinstance(store, LocalStore) else _SegmentLog(store, stem)


# ---------------------------------------------------------------------------------- writer
#: What status.json says about a failure beside its error line (``skyrl_core.resume.Failure.fields``).
_FAILURE_FIELDS = ("error_kind", "resumable")


class RunWriter:
    """Writes one run directory (a local folder or an object-store URL). Used by the engine; safe to
    re-open when a run resumes."""

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.store = open_store(run_dir)
        #: the run directory: a Path on a local disk, a URL string on an object store
        self.run_dir: Path | str = self.store.root
        self.trajectory_dir = join(self.run_dir, "trajectories")
        if isinstance(self.store, LocalStore):
            self.store.path("trajectories").mkdir(parents=True, exist_ok=True)
            self.store.path("checkpoints").mkdir(exist_ok=True)
        self._logs = {stem: _log(self.store, stem) for stem in ("metrics", "events")}
        #: called with ``(step, row)`` after each metrics line is written (Prometheus, MLflow, ... loggers)
        self.metric_listeners: list[Callable[[int, dict[str, Any]], None]] = []
        status, problems = _read_status(self.store)
        self._status: dict[str, Any] = status or _new_status()
        #: what was wrong with the files found here (also logged as ``warning`` events)
        self.warnings: list[str] = []
        for problem in problems:
            self._warn(problem + ("" if status else "; starting a fresh status"))

    def write_config(self, config: Any) -> str | Path:
        """Save the resolved config (a JobConfig or a plain dict) as config.yaml."""
        data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        return self.put_file("config.yaml", yaml.safe_dump(data, sort_keys=False).encode())

    @property
    def state(self) -> str:
        """The run's state as this writer last wrote it (``pending`` before any)."""
        return str(self._status.get("state") or RunState.PENDING.value)

    def put_file(self, name: str, data: bytes) -> str | Path:
        """Write ``<run_dir>/<name>`` whole, atomically (e.g. ``tokenizer/tokenizer.json``); returns where."""
        self.store.put(name, data)
        return self.store.path(name)

    def set_status(self, state: str | None = None, **fields: Any) -> dict[str, Any]:
        """Update status.json (atomic rewrite); the heartbeat is always refreshed."""
        if state is not None:
            if state not in STATES:
                raise ValueError(f"state: {state!r} is not allowed; allowed: {', '.join(STATES)}")
            state = RunState(state).value
            self._status["state"] = state
            if state == RunState.RUNNING and not self._status.get("started_at"):
                self._status["started_at"] = time.time()
            if state in FINAL_STATES:
                self._status["ended_at"] = time.time()
            elif state == RunState.RUNNING:
                self._status["ended_at"] = None
                self._status["error"] = None
                for name in _FAILURE_FIELDS:  # an earlier attempt's failure is not this one's
                    self._status.pop(name, None)
        allowed = ("step", "total_steps", "error", "pid", *_FAILURE_FIELDS)
        unknown = set(fields) - set(allowed)
        if unknown:
            raise ValueError(f"status field(s) {sorted(unknown)} are not allowed; allowed: {', '.join(allowed)}")
        self._status.update(fields)
        self._status["heartbeat"] = time.time()
        self.store.put("status.json", json.dumps(self._status).encode())
        return dict(self._status)

    def record_failure(self, err: BaseException, step: int | None = None, traceback: str | None = None) -> dict[str, Any]:
        """Record that the run failed with ``err`` at ``step`` (None: the step status.json has, e.g. a resume
        that failed before training): an ``error`` event (with the traceback) and status ``failed``, both
        carrying the error line and what it means for a resume (``error_kind``, ``resumable``:
        ``skyrl_core.resume.classify_failure``). Returns the status written."""
        from skyrl_core.failures import classify_failure

        text = f"{type(err).__name__}: {err}"
        failure = classify_failure(err).fields()
        at = {} if step is None else {"step": int(step)}
        self.log_event("error", step=at.get("step", self._status.get("step") or 0), error=text, traceback=traceback,
                       **failure)
        return self.set_status(RunState.FAILED, error=text, **at, **failure)

    def reset(self) -> None:
        """Start the run over: forget metrics, events, trajectories and status (checkpoints are kept)."""
        for log in self._logs.values():
            log.delete()
        self.store.delete("status.json")
        for name in self.store.list("trajectories"):
            self.store.delete(f"trajectories/{name}")
        self._status = _new_status()

    def heartbeat(self) -> None:
        self.set_status()

    def log_metrics(self, step: int, metrics: dict[str, Any]) -> None:
        """Append one line for ``step`` (counted from 1) to metrics.jsonl and flush it."""
        row = {"step": int(step), "time": time.time()}
        row.update({k: _clean_number(v) for k, v in metrics.items() if k not in ("step", "time")})
        self._append("metrics", row)
        for listener in self.metric_listeners:
            listener(int(step), row)

    def log_event(self, kind: str, **data: Any) -> None:
        """Append a lifecycle event (started, checkpoint_saved, eval, warning, error, ...)."""
        self._append("events", {"time": time.time(), "kind": kind, **data})

    def write_trajectories(self, step: int, rows: list[dict[str, Any]] | Any) -> str | Path:
        """Write one Parquet part for ``step`` atomically; rows is a list of dicts or a pyarrow Table."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(list(rows))
        name = f"trajectories/{part_name(step)}"
        if isinstance(self.store, LocalStore):
            path = self.store.path(name)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            pq.write_table(table, tmp, compression="zstd")
            os.replace(tmp, path)
            return path
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        return self.put_file(name, sink.getvalue().to_pybytes())

    def truncate_after(self, step: int) -> None:
        """Forget everything logged after ``step``: used when a run resumes from a checkpoint.

        Kept lines stay byte for byte (a reader knows them by step and time, see ``RunReader.poll``);
        lines that are not JSON objects (a torn line from a killed writer, damage) are dropped, and
        the drop is logged as a ``warning`` event.
        """
        dropped = []
        for stem, log in self._logs.items():
            try:
                lines = log.read_all().split(b"\n")
            except FileNotFoundError:
                continue
            kept, bad = [], 0
            for line in lines:
                if not line.strip():
                    continue
                row, _why = _json_object(line)
                # events without a step (started, error, ...) are history worth keeping; a metric row needs one
                row_step = None if row is None else row.get("step")
                if row is None or (stem == "metrics" and not _is_count(row_step)):
                    bad += 1
                elif not _is_count(row_step) or row_step <= step:
                    kept.append(line + b"\n")
            log.rewrite(b"".join(kept))
            if bad:
                dropped.append(f"{stem}.jsonl: {bad} damaged line(s) dropped by the resume")
        for name in self.store.list("trajectories"):
            part_of = part_step(name)
            if (part_of is not None and part_of > step) or name.endswith(".tmp"):
                self.store.delete(f"trajectories/{name}")
        self._status["step"] = step
        for problem in dropped:
            self._warn(problem)

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.log_event("warning", message=message)

    def _append(self, stem: str, row: dict[str, Any]) -> None:
        self._logs[stem].append((json.dumps(row, default=_json_default) + "\n").encode())


# ---------------------------------------------------------------------------------- reader
class _LineReader:
    """Turns complete JSONL lines into rows: a line that is not a JSON object (or, with ``need_step``, has
    no step) is skipped and reported through ``warn``; a row already returned, known by its
    ``(step, time)``, is not returned again (after a resume rewrote the log, it is read from the start).

    NUL bytes (a crash that left a zero-filled block) are never part of a line: each run of them is named
    with its byte offset and the text around it is read as lines. With ``need_step`` (metrics), a line
    whose step is lower than one before it (out of order) or a step missing between two lines is a
    warning, and each read's rows come back in step order (a step's later row after its earlier one).
    ``ended`` (when given) says whether the run has ended: only then is a torn last line damage.
    """

    def __init__(self, name: str, warn: Callable[[str], None], need_step: bool,
                 ended: Callable[[], bool] | None = None):
        self.name = name
        self._line = 0  # lines read so far, for messages
        self._returned: set[tuple[Any, float]] = set()
        self._warn = warn
        self._need_step = need_step
        self._ended = ended
        self._restart()

    def _restart(self) -> None:
        """Forget the order seen so far (the log is read again from its start)."""
        self._line = 0
        self._top: int | None = None  # the highest step read so far
        # steps skipped by a jump not yet reported: (first, last, line, step before, step after)
        self._holes: list[tuple[int, int, int, int, int]] = []

    def _rows(self, chunk: bytes, base: int = 0) -> list[dict[str, Any]]:
        """The rows of complete lines ``chunk``, which starts at byte ``base`` of the log."""
        rows = []
        pos = base
        for line in chunk.split(b"\n"):
            self._line += 1
            start, pos = pos, pos + len(line) + 1
            pieces = [(start, line)]
            if b"\x00" in line:
                for m in re.finditer(rb"\x00+", line):
                    self._warn(f"{self.name} line {self._line}: {m.end() - m.start()} NUL byte(s) at byte "
                               f"{start + m.start()}; skipped")
                pieces = [(start + m.start(), m.group()) for m in re.finditer(rb"[^\x00]+", line)]
            for offset, text in pieces:
                if text.strip():
                    self._row(text, offset, rows)
        return rows

    def _row(self, text: bytes, offset: int, rows: list[dict[str, Any]]) -> None:
        row, why = _json_object(text)
        if row is None or (self._need_step and not _is_count(row.get("step"))):
            why = why or f"has no step ({shown(row.get('step') if row else None)})"
            self._warn(f"{self.name} line {self._line} (byte {offset}) {why}; skipped")
            return
        step, stamp = row.get("step"), row.get("time")
        if self._need_step:
            self._order(step)
        if _is_number(stamp) and (step is None or _is_count(step)):
            if (step, stamp) in self._returned:
                return
            self._returned.add((step, stamp))
        rows.append(row)

    def _order(self, step: int) -> None:
        """Note a metric line's step: out of order, or a jump past steps (a hole, reported by ``_finish``)."""
        top = self._top
        if top is None or step == top:
            self._top = step if top is None else top
            return
        if step < top:
            self._warn(f"{self.name} line {self._line}: step {step} comes after step {top} (out of order); "
                       "rows are read in step order")
            holes = []
            for first, last, *rest in self._holes:  # the late line fills a hole
                if first <= step <= last:
                    holes += [(a, b, *rest) for a, b in ((first, step - 1), (step + 1, last)) if a <= b]
                else:
                    holes.append((first, last, *rest))
            self._holes = holes
            return
        if step > top + 1:
            self._holes.append((top + 1, step - 1, self._line, top, step))
        self._top = step

    def _finish(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """One read's rows, in step order for metrics, with the holes left in the steps reported."""
        for first, last, line, before, after in self._holes:
            steps = f"step {first}" if first == last else f"steps {first}..{last}"
            self._warn(f"{self.name} line {line}: {steps} missing (step {before}, then step {after})")
        self._holes = []
        if self._need_step:
            rows.sort(key=lambda row: row["step"])
        return rows

    def _leftover(self, fragment: bytes, base: int) -> tuple[list[dict[str, Any]], int]:
        """``(rows, bytes used)`` of what follows a log's last newline (at byte ``base``).

        Up to its last NUL byte it is damage, named now. The rest is a line still being written, unless
        it is a whole JSON object (only its newline is missing: returned; a strict prefix of one never
        parses) or the run has ended (then it was cut short: named, left unread).
        """
        rows: list[dict[str, Any]] = []
        used = fragment.rfind(b"\x00") + 1
        if used:
            rows = self._rows(fragment[:used], base)
            self._line -= 1  # the line goes on after the NUL bytes
        rest = fragment[used:]
        if not rest.strip():
            return rows, used
        row, _ = _json_object(rest)
        if row is not None and (not self._need_step or _is_count(row.get("step"))):
            rows += self._rows(rest, base + used)
            self._line -= 1  # its newline, when it comes, is not another line
            return rows, len(fragment)
        if self._ended is not None and self._ended():
            self._warn(f"{self.name}: the last line ({len(rest)} bytes at byte {base + used}) is cut short and "
                       "the run has ended; skipped")
        return rows, used


class _Tail(_LineReader):
    """Reads complete new lines of a growing local JSONL file from a remembered byte offset.

    A rewrite (a resume's ``truncate_after``: a new inode or a shorter file) is read again from the
    start, skipping rows already returned: a kept row is never returned twice. Rows a resume writes for
    steps returned before are new data (the steps were trained again) and are returned; readers let a
    step's later row replace its earlier one, as ``skyrl_nb.dashboard.RunSeries`` does.
    """

    def __init__(self, path: Path, warn: Callable[[str], None], *, need_step: bool = False,
                 ended: Callable[[], bool] | None = None):
        super().__init__(path.name, warn, need_step, ended)
        self.path = path
        self.offset = 0
        self._inode: int | None = None

    def read_new(self) -> list[dict[str, Any]]:
        try:
            st = self.path.stat()
            if self._inode is not None and (st.st_ino != self._inode or st.st_size < self.offset):
                self.offset = 0  # the file was rewritten (a resume truncated it)
                self._restart()
            self._inode = st.st_ino
            if st.st_size == self.offset:
                return []
            with self.path.open("rb") as f:
                f.seek(self.offset)
                chunk = f.read(st.st_size - self.offset)
        except FileNotFoundError:
            return []
        except OSError as err:
            self._warn(f"{self.path.name} cannot be read ({os_reason(err)}); skipped")
            return []
        end = chunk.rfind(b"\n")
        rows = self._rows(chunk[:end], self.offset) if end >= 0 else []
        extra, used = self._leftover(chunk[end + 1:], self.offset + end + 1)
        self.offset += end + 1 + used
        return self._finish(rows + extra)


class _SegmentTail(_LineReader):
    """Reads new lines of an object-store log (``_SegmentLog``) by byte range, guided by one listing.

    Only segments that grew since the last read are fetched, from the remembered offset; a newer
    generation (a resume rewrote the log) is read from its start, skipping rows already returned.
    """

    def __init__(self, store: Store, stem: str, listing: Callable[[], dict[str, Entry]],
                 warn: Callable[[str], None], *, need_step: bool = False, ended: Callable[[], bool] | None = None):
        super().__init__(f"{stem}.jsonl", warn, need_step, ended)
        self.store, self.stem, self._listing = store, stem, listing
        self.generation: int | None = None
        self.segment, self.offset = 0, 0

    def read_new(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        try:
            generation, segments = _segments(self._listing(), self.stem)
            if generation is None:
                return []
            if self.generation is not None and generation != self.generation:
                self.segment, self.offset = 0, 0
                self._restart()
            self.generation = generation
            for segment, name, entry in segments:
                if segment < self.segment:
                    continue
                if segment > self.segment:
                    self.segment, self.offset = segment, 0
                if entry.size <= self.offset:
                    continue
                chunk = self.store.read_range(name, self.offset, entry.size)
                end = chunk.rfind(b"\n")
                if end >= 0:
                    rows.extend(self._rows(chunk[:end], self.offset))
                extra, used = self._leftover(chunk[end + 1:], self.offset + end + 1)
                rows.extend(extra)
                self.offset += end + 1 + used
        except FileNotFoundError:  # a segment deleted between the listing and the read: next time
            pass
        except OSError as err:
            self._warn(f"{self.name} cannot be read ({os_reason(err)}); skipped")
        return self._finish(rows)


class RunReader:
    """Reads one run directory (a local folder or an object-store URL), incrementally. ``poll()``
    returns only rows written since the last call.

    Damaged files never raise: what was skipped is in ``warnings``, one line each, reported once.

    >>> run = RunReader("~/skyrl-runs/my-run")      # doctest: +SKIP
    >>> run = RunReader("s3://my-bucket/skyrl-runs/my-run")      # doctest: +SKIP
    >>> run.status()["state"], len(run.metrics())    # doctest: +SKIP
    """

    def __init__(self, run_dir: str | os.PathLike[str]):
        self.store = open_store(run_dir)
        #: the run directory: a Path on a local disk, a URL string on an object store
        self.run_dir: Path | str = self.store.root
        #: one line per damaged file or line skipped so far (``status.json is not JSON; ...``)
        self.warnings: list[str] = []
        self._listed: tuple[float, dict[str, Entry]] | None = None
        self._pinned_since: float | None = None
        self._status_bytes: tuple[str, bytes] | None = None
        self._metrics_tail = self._tail("metrics")
        self._events_tail = self._tail("events")

    def _tail(self, stem: str, fresh: bool = False) -> _Tail | _SegmentTail:
        need_step = stem == "metrics"
        if isinstance(self.store, LocalStore):
            return _Tail(self.store.path(f"{stem}.jsonl"), self._warn, need_step=need_step, ended=self._ended)
        listing = (lambda: self._listing(fresh=True)) if fresh or need_step else self._listing
        return _SegmentTail(self.store, stem, listing, self._warn, need_step=need_step, ended=self._ended)

    def _ended(self) -> bool:
        """Whether the run has ended (nothing more will be appended to its logs): a final or reader's state."""
        status = self.status()
        return status.get("state") not in (RunState.PENDING, RunState.RUNNING) or bool(status.get("lost"))

    def _listing(self, fresh: bool = False) -> dict[str, Entry]:
        """The run folder's files (object stores): one LIST, reused for ``LISTING_TTL_S``, or for the
        whole of a ``one_listing`` block once one was made inside it."""
        now = time.monotonic()
        pinned = self._pinned_since is not None and self._listed is not None and self._listed[0] >= self._pinned_since
        if not pinned and (fresh or self._listed is None or now - self._listed[0] > LISTING_TTL_S):
            self._listed = (now, self.store.list())
        return self._listed[1]

    @contextlib.contextmanager
    def one_listing(self) -> Iterator[RunReader]:
        """Every read inside the block sees the run folder as one LIST made inside it saw it (object
        stores; a local folder is read as it is): a dashboard's refresh (poll, poll_events, status) costs
        one LIST on a loaded machine too, where its reads outlast ``LISTING_TTL_S``.

        >>> with reader.one_listing():      # doctest: +SKIP
        ...     rows, events, status = reader.poll(), reader.poll_events(), reader.status()
        """
        outer = self._pinned_since
        if outer is None:
            self._pinned_since = time.monotonic()
        try:
            yield self
        finally:
            self._pinned_since = outer

    def _read(self, name: str) -> bytes:
        """A top-level file's bytes; on an object store status.json is fetched only when its ETag changed."""
        if isinstance(self.store, LocalStore):
            return self.store.read(name)
        entry = self._listing().get(name)
        if entry is None:
            raise FileNotFoundError(self.store.path(name))
        if name == "status.json" and self._status_bytes and self._status_bytes[0] == entry.tag:
            return self._status_bytes[1]
        data = self.store.read(name)
        if name == "status.json":
            self._status_bytes = (entry.tag, data)
        return data

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    @property
    def run_id(self) -> str:
        return str(self.run_dir).rstrip("/").replace("\\", "/").rpartition("/")[2]

    @property
    def local(self) -> bool:
        """Whether the run directory is on this machine's disk (else an object store)."""
        return isinstance(self.store, LocalStore)

    def unreadable(self) -> str | None:
        """Why the run folder cannot be read by this user (``permission denied for this user``, ``a
        symbolic-link loop``), or None when it can (or is missing). An object store answers None."""
        if not isinstance(self.store, LocalStore):
            return None
        try:
            with os.scandir(self.store.root):
                return None
        except FileNotFoundError:
            return None
        except OSError as err:
            return os_reason(err)

    def _has_files(self) -> bool:
        """Whether anything of a run besides status.json is here (config.yaml or a log)."""
        try:
            if isinstance(self.store, LocalStore):
                return any(self.store.exists(n) for n in ("config.yaml", "metrics.jsonl", "events.jsonl"))
            listing = self._listing()
            return "config.yaml" in listing or any(_SEGMENT_RE.match(n) for n in listing)
        except OSError:
            return False

    def exists(self) -> bool:
        if isinstance(self.store, LocalStore):
            return self.store.exists("status.json") or self.store.exists("config.yaml")
        listing = self._listing(fresh=True)
        return "status.json" in listing or "config.yaml" in listing

    def config(self) -> dict[str, Any]:
        """config.yaml as a dict; ``{}`` (and a warning) when it is missing or damaged."""
        try:
            data = yaml.safe_load(self._read("config.yaml").decode("utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, yaml.YAMLError, RecursionError) as err:
            why = os_reason(err) if isinstance(err, OSError) else type(err).__name__
            self._warn(f"config.yaml cannot be read ({why}); skipped")
            return {}
        if not isinstance(data, dict):
            self._warn(f"config.yaml is not a mapping ({shown(data)}); skipped")
            return {}
        return data

    def status(self) -> dict[str, Any]:
        """status.json, with ``lost: True`` added when a running job's heartbeat went stale.

        A status.json that cannot be read gives state ``damaged`` (``ReadState.DAMAGED``); a run that has
        files but no status.json gives ``no_status`` (``ReadState.NO_STATUS``), not ``pending``: nothing
        says whether it ever ran. ``warnings`` says why.
        """
        missing = False
        try:
            data: bytes | None = self._read("status.json")
            status, problems = _read_status(self.store, data)
        except FileNotFoundError:
            status, problems, missing = None, [], True
        except OSError as err:
            status, problems = None, [f"status.json cannot be read ({os_reason(err)})"]
        for problem in problems:
            self._warn(problem + ("; skipped" if status else f"; the run is shown as {DAMAGED}"))
        if status is None:
            status = _new_status()
            if problems:
                status["state"] = DAMAGED
            elif missing and self._has_files():
                status["state"] = ReadState.NO_STATUS.value
                self._warn(f"status.json is missing; the run is shown as {ReadState.NO_STATUS.value} "
                           "(its state is unknown)")
        beat = status.get("heartbeat")
        status["lost"] = bool(status.get("state") == RunState.RUNNING and beat and time.time() - beat > HEARTBEAT_STALE_S)
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
        """Every metric row, re-read."""
        return self._tail("metrics", fresh=True).read_new()

    def events(self) -> list[dict[str, Any]]:
        return self._tail("events", fresh=True).read_new()

    def last_metrics(self) -> dict[str, Any]:
        """The newest metric row ({} when there is none); on an object store only the last segment is read."""
        if isinstance(self.store, LocalStore):
            rows = self.metrics()
            return rows[-1] if rows else {}
        _, segments = _segments(self._listing(fresh=True), "metrics")
        for _, name, entry in reversed(segments):
            if entry.size:
                tail = _LineReader(name, self._warn, need_step=True)
                try:
                    rows = tail._finish(tail._rows(self.store.read(name).rstrip(b"\n")))
                except FileNotFoundError:
                    return {}
                if rows:
                    return rows[-1]
        return {}

    def reward_change(self) -> RewardChange:
        """Reward first -> last of this run (:func:`reward_change` over every metrics row)."""
        return reward_change(row.get(REWARD_KEY) for row in self.metrics())

    def metrics_frame(self):
        """All metric rows as a pandas DataFrame indexed by step."""
        import pandas as pd

        frame = pd.DataFrame(self.metrics())
        return frame.set_index("step", drop=False) if "step" in frame else frame

    def trajectory_steps(self) -> list[int]:
        """Steps that have a complete trajectory part, in order; a ``trajectories`` folder (or an entry in
        it) that cannot be read is named in ``warnings`` and skipped."""
        problems: list[str] = []
        names = self.store.list("trajectories", problems=problems)
        for problem in problems:
            self._warn(problem)
        return sorted(step for name in names if (step := part_step(name)) is not None)

    def trajectory_path(self, step: int) -> Path | str:
        return self.store.path(f"trajectories/{part_name(step)}")

    def read_file(self, name: str) -> bytes:
        """The bytes of ``<run_dir>/<name>`` (e.g. ``tokenizer/tokenizer.json``); FileNotFoundError if missing."""
        return self.store.read(name)

    def trajectories(self, step: int, columns: Iterable[str] | None = None):
        """The rows of one step's part as a DataFrame (only ``columns`` when given).

        FileNotFoundError when the step has no part; an empty frame (and a warning) when it is damaged.
        """
        import pandas as pd

        try:
            return read_run_part(self.store, step, columns).to_pandas()
        except FileNotFoundError:
            raise FileNotFoundError(f"step {step}: no trajectory part at {self.trajectory_path(step)}; "
                                    f"steps with parts: {_span(self.trajectory_steps())}") from None
        except DamagedFile as err:
            self._warn(f"{err}; skipped")
            return pd.DataFrame()

    def summary(self) -> RunSummary:
        status = self.status()
        last = self.last_metrics()
        reward = last.get(REWARD_KEY)
        return RunSummary(
            run_id=self.run_id,
            path=str(self.run_dir),
            state=ReadState.LOST.value if status.get("lost") else status.get("state", RunState.PENDING.value),
            step=int(status.get("step") or last.get("step") or 0),
            total_steps=status.get("total_steps"),
            last_reward=reward if _is_number(reward) else None,
            error=status.get("error"),
            started_at=status.get("started_at"),
            warnings=tuple(self.warnings),
        )

    def export(self, path: str | os.PathLike[str], step: int | None = None) -> ExportResult:
        """Write checkpoint ``step`` (default: the latest) as a Hugging Face model directory at ``path`` (a new
        local directory or ``s3://bucket/prefix``); returns the :class:`~skyrl_core.exports.ExportResult`.

        The engine does it in a process of its own (``python -m skyrl_engine export ... --json``, with this
        Python), so the kernel never imports torch; it needs the engine installed beside this Python
        (``pip install 'skyrl-nb[engine]'``). A source, step or destination that cannot be used is
        :class:`~skyrl_core.exports.ExportError`, one line naming it.

        >>> open_run("~/skyrl-runs/my-run").export("~/models/my-run")     # doctest: +SKIP
        """
        import subprocess
        import sys

        cmd = [sys.executable, "-m", "skyrl_engine", "export", str(self.run_dir), os.fspath(path), "--json"]
        if step is not None:
            cmd += ["--step", str(int(step))]
        done = subprocess.run(cmd, capture_output=True, text=True)
        lines = done.stdout.strip().splitlines()
        if done.returncode == 0 and lines:
            return ExportResult.from_json(lines[-1])
        errors = [line.strip() for line in done.stderr.strip().splitlines() if line.strip()]
        if done.returncode == 2:
            raise ExportError("; ".join(errors) or f"the export of {self.run_id} was refused")
        if "No module named skyrl_engine" in done.stderr:
            raise RuntimeError(f"export needs the engine beside this Python ({sys.executable}): pip install "
                               "'skyrl-nb[engine]'")
        raise RuntimeError(f"the export of {self.run_id} failed (exit {done.returncode}): "
                           f"{errors[-1] if errors else 'no output'}")

    def __repr__(self) -> str:
        s = self.summary()
        return f"RunReader({s.run_id!r}, state={s.state}, step={s.step}/{s.total_steps}, path={s.path!r})"

    def _repr_html_(self) -> str:
        summary = dataclasses.replace(self.summary(), reward=self.reward_change())
        taken = "" if summary.state in FINAL_STATES else f" <small>(as of {time.strftime('%H:%M:%S')})</small>"
        return summary._repr_html_().removesuffix("</div>") + f"{taken}</div>"


#: What a trajectory part's columns must hold where a part has them (a column of nulls passes too).
PART_TYPES = {"step": "integer", "prompt": "string", "response": "string", "reward": "number",
              "advantage": "number", "num_tokens": "number"}
#: A trajectory part has at least one of these; a Parquet file with none of them is not a part.
PART_CORE = ("prompt", "response", "reward")


def part_schema_problem(schema: Any, required: Iterable[str] = ()) -> str | None:
    """What is wrong with a trajectory part's pyarrow schema, in words (``reward is string, not a number``),
    or None. Columns in :data:`PART_TYPES` must have that type; ``required`` columns must be there."""
    import pyarrow as pa

    kinds = {"integer": ("an integer", pa.types.is_integer),
             "string": ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
             "number": ("a number", lambda t: pa.types.is_integer(t) or pa.types.is_floating(t))}
    names = list(schema.names)
    if not any(c in names for c in PART_CORE):
        listed = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
        return f"has none of the columns {', '.join(PART_CORE)} (it has: {listed or 'no columns'})"
    missing = [c for c in required if c not in names]
    if missing:
        return f"has no {', '.join(missing)} column"
    for column, kind in PART_TYPES.items():
        if column in names:
            typ = schema.field(column).type
            what, allowed = kinds[kind]
            if not (pa.types.is_null(typ) or allowed(typ)):
                return f"has {column} of type {typ}, not {what}"
    return None


def read_run_part(store: Store, step: int, columns: Iterable[str] | None = None, *, required: Iterable[str] = ()):
    """Step ``step``'s trajectory part of the run in ``store`` as a pyarrow Table (see :func:`read_part`)."""
    name = f"trajectories/{part_name(step)}"
    if isinstance(store, LocalStore):
        return read_part(store.path(name), columns, required=required)
    return read_part(store.read(name), columns, name=part_name(step), required=required)


def read_part(source: str | os.PathLike[str] | bytes, columns: Iterable[str] | None = None, *,
              name: str | None = None, required: Iterable[str] = ()):
    """One trajectory part (a file path, or its bytes read from an object store) as a pyarrow Table,
    with only those of ``columns`` it has (all when None).

    FileNotFoundError when it is missing; :class:`DamagedFile` (one line naming it) when it is not a
    readable Parquet file (0 bytes, cut short, overwritten, unreadable for this user) or not a trajectory
    part (:func:`part_schema_problem`; ``required``: columns the caller cannot do without).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if isinstance(source, bytes):
        where: Any = pa.BufferReader(source)
        name = name or "part"
    else:
        where = Path(source)
        name = name or where.name
    try:
        part = pq.ParquetFile(where)
        problem = part_schema_problem(part.schema_arrow, required)
        names = part.schema_arrow.names
        table = None if problem else part.read(columns=None if columns is None else [c for c in columns if c in names])
    except FileNotFoundError:
        raise
    except (OSError, ValueError, pa.ArrowException) as err:
        reason = os_reason(err) if isinstance(err, OSError) and err.errno else " ".join(str(err).split())[:100]
        raise DamagedFile(f"trajectories/{name} is not a readable Parquet file ({reason or type(err).__name__})") \
            from None
    if problem:
        raise DamagedFile(f"trajectories/{name} is not a trajectory part: it {problem}")
    return table


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
    reward: RewardChange | None = None
    """Reward first -> last (:func:`reward_change`), when the summary was asked for it (``list_runs`` does)."""

    def reward_text(self) -> str:
        """``0.241 -> 0.259 (+0.018; means of ...)`` when known, else the last step's reward, else ``-``."""
        if self.reward is not None and self.reward.first is not None:
            return str(self.reward)
        return "-" if self.last_reward is None else f"last {self.last_reward:.3f}"

    def __str__(self) -> str:
        skipped = f"  ({len(self.warnings)} skipped: {self.warnings[0][:80]})" if self.warnings else ""
        return (f"{self.run_id:<28} {self.state:<10} {self.step:>5}/{self.total_steps or '?':<5} "
                f"reward {self.reward_text()}{skipped}")

    def _repr_html_(self) -> str:
        colour = {RunState.RUNNING: "#1f77b4", RunState.SUCCEEDED: "#2ca02c", RunState.FAILED: "#d62728",
                  RunState.STOPPED: "#7f7f7f", ReadState.LOST: "#ff7f0e", ReadState.DAMAGED: "#8c564b",
                  ReadState.NO_STATUS: "#8c564b", ReadState.UNREADABLE: "#8c564b"}.get(self.state, "#555")
        reward = html.escape(self.reward_text())
        err = f"<br><small>{html.escape(self.error.splitlines()[-1])}</small>" if self.error else ""
        err += "".join(f"<br><small>skipped: {html.escape(w)}</small>" for w in self.warnings[:3])
        return (f"<div><b>{html.escape(self.run_id)}</b> <span style='color:{colour}'>{self.state}</span> "
                f"step {self.step}/{self.total_steps or '?'} &middot; reward {reward}{err}</div>")


class RunList(list):
    """A list of RunSummary that prints as a table; ``warnings``: entries of the run root that could not be
    read at all (a symbolic-link loop, the root itself unreadable), one line each."""

    def __init__(self, summaries: Iterable[RunSummary] = (), warnings: Iterable[str] = ()):
        super().__init__(summaries)
        self.warnings: list[str] = list(warnings)

    def __str__(self) -> str:
        lines = [str(s) for s in self] or ["(no runs)"]
        return "\n".join([*lines, *(f"skipped: {w}" for w in self.warnings)])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        skipped = "".join(f"<br><small>skipped: {html.escape(w)}</small>" for w in self.warnings)
        if not self:
            return f"<i>no runs</i>{skipped}"
        rows = "".join(
            f"<tr><td>{html.escape(s.run_id)}</td><td>{html.escape(s.state)}</td><td>{s.step}/{s.total_steps or '?'}</td>"
            f"<td>{html.escape(s.reward_text())}</td><td>{html.escape('; '.join(s.warnings))}</td></tr>" for s in self)
        return ("<table><tr><th>run</th><th>state</th><th>step</th><th>reward first &rarr; last</th>"
                f"<th>skipped</th></tr>{rows}</table>{skipped}")


class RunUnreadable(PermissionError):
    """A run folder this user cannot read (another user's, a symbolic-link loop); the message is one line."""


def open_run(path: str | os.PathLike[str]) -> RunReader:
    """Open a run directory (finished or running). Raises ``FileNotFoundError`` if it holds no run and
    :class:`RunUnreadable` (one line) if this user cannot read it."""
    reader = RunReader(path)
    why = reader.unreadable()
    if why:
        raise RunUnreadable(f"run: {str(path)!r} cannot be read ({why})")
    if not reader.exists():
        raise FileNotFoundError(f"run: {str(path)!r} is not a run directory (no status.json or config.yaml)")
    return reader


# ``skyrl_nb.runs.open(path)`` as the issue spells it
open = open_run  # noqa: A001


def list_runs(run_root: str | os.PathLike[str] = "~/skyrl-runs") -> RunList:
    """Every run under ``run_root``, newest first, with state, steps and last reward.

    ``run_root`` is a local folder or an object-store URL (``s3://bucket/prefix``). One bad entry never
    hides the others: a run with damaged files is listed with what could be read (state ``damaged`` when
    its status.json cannot be read, ``no_status`` when it has none) and what was skipped in its
    ``warnings``; a folder this user cannot read is listed as ``unreadable``; an entry that cannot even
    be looked at (a symbolic-link loop) is named in the list's ``warnings``.
    """
    store = open_store(run_root)
    problems: list[str] = []
    names = store.folders(problems=problems)
    summaries = [s for name in names if (s := run_summary(join(store.root, name))) is not None]
    summaries.sort(key=lambda s: s.started_at or 0, reverse=True)
    return RunList(summaries, problems)


def run_summary(run_dir: str | os.PathLike[str]) -> RunSummary | None:
    """The :class:`RunSummary` of one folder of a run root, with reward first -> last (None: it holds no
    run). Never raises: a folder this user cannot read is state ``unreadable``, and anything else that
    goes wrong reading it is state ``damaged``, each with the reason in ``warnings``."""
    reader = RunReader(run_dir)
    why = reader.unreadable()
    if why:
        return RunSummary(run_id=reader.run_id, path=str(reader.run_dir), state=ReadState.UNREADABLE.value,
                          step=0, total_steps=None, last_reward=None,
                          warnings=(f"{reader.run_id} cannot be read ({why}); skipped",))
    try:
        if not reader.exists():
            return None
        return dataclasses.replace(reader.summary(), reward=reader.reward_change())
    except Exception as err:  # damage nobody foresaw: this run says so, the others are still listed
        reason = f"{type(err).__name__}: {' '.join(str(err).split())[:160]}"
        return RunSummary(run_id=reader.run_id, path=str(reader.run_dir), state=DAMAGED, step=0,
                          total_steps=None, last_reward=None,
                          warnings=(*reader.warnings, f"{reader.run_id} cannot be read ({reason}); skipped"))


def _span(steps: list[int]) -> str:
    if not steps:
        return "none"
    return f"{steps[0]}..{steps[-1]} ({len(steps)})"
