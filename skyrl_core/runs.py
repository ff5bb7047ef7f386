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

Where the parts live: :mod:`skyrl_core.run_files` (every file of the layout, the logs, the trajectory part's
schema), :mod:`skyrl_core.run_writer` (``RunWriter``), :mod:`skyrl_core.run_tail` (tailing the logs). This module
is the reader a notebook holds (``RunReader``, ``open_run``, ``list_runs``) and offers all of those names too.
One idea, reading runs, whose length is the damage it names instead of raising.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from skyrl_core.choices import FINAL_STATES, ReadState, RunState, values
from skyrl_core.exports import ExportError, ExportResult
from skyrl_core.metric_names import REWARD_KEY
from skyrl_core.part_index import part_index
from skyrl_core.registry import shown
from skyrl_core.run_files import (
    _SEGMENT_RE,
    DAMAGED,
    HEARTBEAT_STALE_S,
    PART_CORE,
    PART_RE,
    PART_TYPES,
    REWARD_WINDOW,
    RUN_ID_PATTERN,
    SEGMENT_BYTES,
    STATES,
    DamagedFile,
    RewardChange,
    _is_number,
    _new_status,
    _read_status,
    _segments,
    atomic_write_text,
    part_name,
    part_schema_problem,
    part_step,
    read_part,
    read_run_part,
    reward_change,
    run_dir_of,
    run_id_problem,
    run_root_problem,
    segment_name,
)
from skyrl_core.run_inputs import RunInputs
from skyrl_core.run_tail import _LineReader, _SegmentTail, _Tail
from skyrl_core.run_writer import RunWriter
from skyrl_core.store import Entry, LocalStore, Store, is_url, join, open_store, os_reason, url_problem

# ---------------------------------------------------------------------------------- logs
__all__ = [
    'RunInputs',
    'FINAL_STATES',
    'ReadState',
    'RunState',
    'values',
    'ExportError',
    'ExportResult',
    'shown',
    'Entry',
    'LocalStore',
    'Store',
    'is_url',
    'join',
    'open_store',
    'os_reason',
    'url_problem',
    'STATES',
    'REWARD_KEY',
    'PART_RE',
    'RUN_ID_PATTERN',
    'HEARTBEAT_STALE_S',
    'DAMAGED',
    'REWARD_WINDOW',
    'RewardChange',
    'reward_change',
    'part_name',
    'part_step',
    'run_id_problem',
    'run_root_problem',
    'run_dir_of',
    'atomic_write_text',
    'DamagedFile',
    'SEGMENT_BYTES',
    'LISTING_TTL_S',
    'segment_name',
    'RunWriter',
    'RunReader',
    'PART_TYPES',
    'PART_CORE',
    'part_schema_problem',
    'read_run_part',
    'read_part',
    'RunSummary',
    'RunList',
    'RunUnreadable',
    'open_run',
    'open',
    'list_runs',
    'run_summary',
]

#: How long (s) the listing of an object-store run folder that ``poll()`` made answers the
#: ``poll_events()`` and ``status()`` calls after it. ``poll()`` itself always lists anew. A dashboard's
#: refresh holds one listing however long its reads take (``RunReader.one_listing``).
LISTING_TTL_S = 0.2


# ---------------------------------------------------------------------------------- writer


# ---------------------------------------------------------------------------------- reader


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

    def inputs(self) -> RunInputs:
        """What launch shipped with this run (``inputs/manifest.json``): data sources with row counts and hashes,
        reward functions with their source; empty for a run without ``data=`` / ``reward=``."""
        try:
            return RunInputs.from_manifest(json.loads(self.store.read("inputs/manifest.json")))
        except (OSError, ValueError):  # none (FileNotFoundError is an OSError), or damaged: nothing recorded
            return RunInputs()

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
        index = part_index(self.store)
        index.scan(full=True)
        if index.problem:
            self._warn(index.problem)
        return list(index.steps)

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
    """Every run under ``run_root``, newest first, with state, steps and last reward (evaluations' stores, which
    live beside the runs, are not runs: ``skyrl_core.eval_store.open_eval`` reads them).

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
        if "evaluation" in reader.config():  # an evaluation's store (skyrl_core.eval_config.SECTION): not a run
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
