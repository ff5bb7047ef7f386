"""The run store's writer: the engine (and the SkyRL bridge) append a run's metrics and events, write its status and
config, and put one trajectory part per step, each atomically (:mod:`skyrl_core.run_files`)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from skyrl_core.choices import FINAL_STATES, RunState
from skyrl_core.run_files import (
    STATES,
    _clean_number,
    _is_count,
    _json_default,
    _json_object,
    _log,
    _new_status,
    _read_status,
    part_name,
    part_step,
)
from skyrl_core.store import LocalStore, join, open_store

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
        self._parts: ThreadPoolExecutor | None = None  # queue_trajectories's thread, started on first use
        self._pending: Future[str | Path] | None = None  # the part it is writing
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
        allowed = ("step", "total_steps", "error", "pid", "attempt", "restarts", *_FAILURE_FIELDS)
        unknown = set(fields) - set(allowed)
        if unknown:
            raise ValueError(f"status field(s) {sorted(unknown)} are not allowed; allowed: {', '.join(allowed)}")
        self._status.update(fields)
        self._status["heartbeat"] = time.time()
        self.store.put("status.json", json.dumps(self._status).encode())
        return dict(self._status)

    def record_failure(self, err: BaseException, step: int | None = None, traceback: str | None = None, *,
                       final: bool = True) -> dict[str, Any]:
        """Record that the run failed with ``err`` at ``step`` (None: the step status.json has, e.g. a resume
        that failed before training): an ``error`` event (with the traceback) and status ``failed``, both
        carrying the error line and what it means for a resume (``error_kind``, ``resumable``:
        ``skyrl_core.resume.classify_failure``). Returns the status written.

        ``final`` False (a trainer under the restart supervisor, ``skyrl_core.resume.SUPERVISOR_ENV``): the
        ``error`` event only; the supervisor restarts the run or writes the ``failed`` status itself, so no
        reader takes a run about to restart for an ended one."""
        from skyrl_core.failures import classify_failure

        text = f"{type(err).__name__}: {err}"
        failure = classify_failure(err).fields()
        at = {} if step is None else {"step": int(step)}
        self.log_event("error", step=at.get("step", self._status.get("step") or 0), error=text, traceback=traceback,
                       **failure)
        if not final:
            return self.set_status(None, **at)
        return self.set_status(RunState.FAILED, error=text, **at, **failure)

    def reset(self) -> None:
        """Start the run over: forget metrics, events, trajectories and status (checkpoints are kept)."""
        self.flush()
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

    def queue_trajectories(self, step: int, rows: list[dict[str, Any]]) -> None:
        """:meth:`write_trajectories` on this writer's own thread, so a step's compute goes on meanwhile (a Parquet
        part costs the tiny model's step 2 ms; on an object store it is an upload). One part at most is in
        flight: this first waits for the one before, and raises its error. :meth:`flush` waits for it."""
        import pyarrow as pa

        table = pa.Table.from_pylist(list(rows))  # here: rows that cannot be stored fail their own step
        self.flush()
        if self._parts is None:
            self._parts = ThreadPoolExecutor(max_workers=1, thread_name_prefix="skyrl-nb-trajectories")
        self._pending = self._parts.submit(self.write_trajectories, step, table)

    def flush(self) -> None:
        """Wait for the trajectory part :meth:`queue_trajectories` has in flight; raise its error, if any."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def truncate_after(self, step: int) -> None:
        """Forget everything logged after ``step``: used when a run resumes from a checkpoint.

        Kept lines stay byte for byte (a reader knows them by step and time, see ``RunReader.poll``);
        lines that are not JSON objects (a torn line from a killed writer, damage) are dropped, and
        the drop is logged as a ``warning`` event.
        """
        self.flush()
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
