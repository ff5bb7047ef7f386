"""The files of a run store and how each is kept: the layout's names (trajectory parts, log segments, the run id
rule), status.json's fields and how a damaged one is named, the append-only logs (a local file, or numbered segments
on an object store, each line one atomic PUT), and the trajectory part's schema, read back column by column.

One idea, the on-disk contract that :mod:`skyrl_core.run_writer` writes and :mod:`skyrl_core.runs` reads; it is
longer than most modules because the contract is: every file of a run is defined here and nowhere else."""

from __future__ import annotations

import html
import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_core.choices import ReadState, RunState, values
from skyrl_core.registry import shown
from skyrl_core.store import Entry, LocalStore, Store, is_url, join, os_reason, url_problem

STATES = values(RunState)




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
    "attempt": _is_count, "restarts": _is_count,  # which resume of the run; automatic restarts in this job
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


#: An object-store log segment is closed once it holds this many bytes; the writer then starts the next.
SEGMENT_BYTES = 256 * 1024


_SEGMENT_RE = re.compile(r"^(metrics|events)\.(\d{4,})-(\d{6,})\.jsonl$")


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


#: A trajectory part's row: one sample of a step, as the engine and the SkyRL bridge both write it
#: (:func:`trajectory_row`). Columns with a type are checked when a part is read (a column of nulls passes too).
TRAJECTORY_COLUMNS: dict[str, str | None] = {
    "step": "integer", "uid": None, "group": None, "prompt": "string", "response": "string", "reward": "number",
    "advantage": "number", "num_tokens": "number", "finish_reason": None, "env_class": None, "data_source": None,
    "discarded_reason": None,
}
#: The per-token columns a run with ``run.store_token_data`` adds (the inspector's heat maps).
TOKEN_COLUMNS = ("token_ids", "token_logprobs", "token_advantages")
#: What a trajectory part's columns must hold where a part has them.
PART_TYPES = {column: kind for column, kind in TRAJECTORY_COLUMNS.items() if kind}


def trajectory_row(*, step: int, uid: str, group: Any, prompt: str, response: str, reward: float, advantage: float,
                   num_tokens: int, finish_reason: str | None, env_class: str, data_source: str,
                   discarded_reason: str | None = None, token_ids: list[int] | None = None,
                   token_logprobs: list[float] | None = None, token_advantages: list[float] | None = None,
                   **extra: Any) -> dict[str, Any]:
    """One trajectory row in :data:`TRAJECTORY_COLUMNS` order; the :data:`TOKEN_COLUMNS` when ``token_ids`` is
    given; then ``extra`` columns (``turns``, ``ground_truth``, ...)."""
    row: dict[str, Any] = {
        "step": int(step), "uid": uid, "group": group, "prompt": prompt, "response": response, "reward": float(reward),
        "advantage": float(advantage), "num_tokens": int(num_tokens), "finish_reason": finish_reason,
        "env_class": env_class, "data_source": data_source, "discarded_reason": discarded_reason,
    }
    if token_ids is not None:
        row.update(token_ids=token_ids, token_logprobs=token_logprobs, token_advantages=token_advantages)
    row.update(extra)
    return row


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


def _wanted(columns: Iterable[str], names: list[str]) -> list[str]:
    """The part's columns among ``columns``; ``"reward/*"`` stands for every column that starts ``reward/``."""
    columns = list(columns)
    prefixes = tuple(c[:-1] for c in columns if c.endswith("*"))
    return [n for n in names if n in columns or (prefixes and n.startswith(prefixes))]


def read_part(source: str | os.PathLike[str] | bytes, columns: Iterable[str] | None = None, *,
              name: str | None = None, required: Iterable[str] = ()):
    """One trajectory part (a file path, or its bytes read from an object store) as a pyarrow Table,
    with only those of ``columns`` it has (all when None; ``prefix*`` names every column starting ``prefix``).

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
        table = None if problem else part.read(columns=None if columns is None else _wanted(columns, names))
    except FileNotFoundError:
        raise
    except (OSError, ValueError, pa.ArrowException) as err:
        reason = os_reason(err) if isinstance(err, OSError) and err.errno else " ".join(str(err).split())[:100]
        raise DamagedFile(f"trajectories/{name} is not a readable Parquet file ({reason or type(err).__name__})") \
            from None
    if problem:
        raise DamagedFile(f"trajectories/{name} is not a trajectory part: it {problem}")
    return table
