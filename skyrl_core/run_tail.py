"""Reading a run's append-only logs as they grow: by byte offset (a local file) or by segment (an object store),
ignoring a torn last line, naming damage (NUL bytes, bad JSON, steps out of order or missing) once, and never
holding the whole history."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyrl_core.registry import shown
from skyrl_core.run_files import _is_count, _is_number, _json_object, _segments
from skyrl_core.store import Entry, Store, os_reason


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
