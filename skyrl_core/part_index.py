"""Which trajectory parts a run has, kept current cheaply: the run store's one listing of a run's parts, used by
``RunReader.trajectory_steps`` and the inspector alike. A local run is followed with a few ``stat`` calls per
refresh; a run on an object store with one LIST of the names after the newest known part."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from skyrl_core.run_files import part_name, part_step
from skyrl_core.store import Store, os_reason


@dataclass
class ScanResult:
    """What one look at ``trajectories/`` found compared with the previous look."""

    added: list[int] = field(default_factory=list)
    changed: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)

    #: True when the only change is new steps after the newest known one (a refresh while training)
    only_appended: bool = False

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


class PartIndex:
    """Steps -> part files of one run, kept current with a few ``stat`` calls per refresh.

    Parts appear in step order, each by an atomic rename. So a refresh first looks at the folder's
    mtime (unchanged: nothing was added, removed or renamed), then at the newest known part (gone or a
    new inode: a resume truncated or rewrote it) and then probes ``step+1, step+2, ...``. Only when
    none of that explains a change (a gap in the steps, a file we do not know) does it list the folder.
    """

    def __init__(self, trajectory_dir: Path):
        self.dir = trajectory_dir
        self._inodes: dict[int, int] = {}
        self.steps: list[int] = []
        self._dir_mtime: int | None = None
        self.full_scans = 0
        #: why the folder could not be read at the last look (not a folder, permission, a link loop), or None
        self.problem: str | None = None

    def path(self, step: int) -> Path:
        return self.dir / part_name(step)

    def __contains__(self, step: int) -> bool:
        return step in self._inodes

    def scan(self, full: bool = False) -> ScanResult:
        """Compare the folder with what we knew; return added / rewritten / removed steps.

        ``full=True`` lists the folder whatever the cheap checks say (a part written after a gap in
        the steps is otherwise noticed only at the next write).
        """
        try:
            return self._scan(full)
        except OSError as err:  # the folder (or a part in it) cannot be looked at: no parts, said once
            self.problem = f"{self.dir.name} cannot be read ({os_reason(err)}); skipped"
            removed = list(self.steps)
            self._inodes, self.steps, self._dir_mtime = {}, [], None
            return ScanResult(removed=removed)

    def _scan(self, full: bool) -> ScanResult:
        if full:
            return self._full_scan(self._mtime())
        try:
            mtime = os.stat(self.dir).st_mtime_ns
        except FileNotFoundError:
            return self._full_scan()
        # a change within the filesystem's timestamp granularity can leave mtime equal: only trust
        # an unchanged mtime once it is a second old
        if mtime == self._dir_mtime and time.time_ns() - mtime > 1_000_000_000:
            return ScanResult()
        if not self.steps:
            return self._full_scan(mtime)
        last = self.steps[-1]
        try:
            if os.stat(self.path(last)).st_ino != self._inodes[last]:
                return self._full_scan(mtime)
        except FileNotFoundError:
            return self._full_scan(mtime)
        added = []
        step = last + 1
        while True:
            try:
                ino = os.stat(self.path(step)).st_ino
            except FileNotFoundError:
                break
            self._inodes[step] = ino
            added.append(step)
            step += 1
        if not added and mtime != self._dir_mtime:
            return self._full_scan(mtime)  # something we cannot explain by appends
        self.steps.extend(added)
        self._dir_mtime = mtime
        return ScanResult(added=added, only_appended=True)

    def _mtime(self) -> int | None:
        try:
            return os.stat(self.dir).st_mtime_ns
        except FileNotFoundError:
            return None

    def _full_scan(self, mtime: int | None = None) -> ScanResult:
        self.full_scans += 1
        seen: dict[int, int] = {}
        try:
            with os.scandir(self.dir) as entries:
                for entry in entries:
                    step = part_step(entry.name)
                    if step is not None:
                        seen[step] = entry.inode()  # d_ino: no stat call
        except FileNotFoundError:
            pass
        self.problem = None
        old = self._inodes
        result = ScanResult(
            added=sorted(s for s in seen if s not in old),
            changed=sorted(s for s, ino in seen.items() if s in old and old[s] != ino),
            removed=sorted(s for s in old if s not in seen),
        )
        self._inodes = seen
        self.steps = sorted(seen)
        self._dir_mtime = mtime
        return result


class StorePartIndex:
    """Steps -> part files of a run on an object store, kept current with one LIST request per refresh.

    Parts appear in step order, so a refresh lists only the names after the newest known part (S3's
    ``StartAfter``). A resume that removed or rewrote parts is seen by a ``full`` scan, which the
    inspector asks for when the run's state changes (a resumed run goes from stopped to running).
    """

    def __init__(self, store: Store):
        self.store = store
        self.dir = store.path("trajectories")
        self._tags: dict[int, str] = {}
        self.steps: list[int] = []
        self.full_scans = 0
        #: why the listing failed at the last look, or None
        self.problem: str | None = None

    def path(self, step: int) -> str:
        return self.store.path(f"trajectories/{part_name(step)}")

    def __contains__(self, step: int) -> bool:
        return step in self._tags

    def scan(self, full: bool = False) -> ScanResult:
        if full or not self.steps:
            self.full_scans += 1
            problems: list[str] = []
            seen = {step: e.tag for n, e in self.store.list("trajectories", problems=problems).items()
                    if (step := part_step(n)) is not None}
            self.problem = problems[0] if problems else None
            old = self._tags
            result = ScanResult(added=sorted(s for s in seen if s not in old),
                                changed=sorted(s for s, tag in seen.items() if s in old and old[s] != tag),
                                removed=sorted(s for s in old if s not in seen))
            self._tags, self.steps = seen, sorted(seen)
            return result
        new = {step: e.tag for n, e in self.store.list_after("trajectories", part_name(self.steps[-1])).items()
               if (step := part_step(n)) is not None}
        self._tags.update(new)
        added = sorted(new)
        self.steps.extend(added)
        return ScanResult(added=added, only_appended=True)


def part_index(store: Store) -> PartIndex | StorePartIndex:
    """The part index for the run in ``store``: by ``stat`` for a local folder, by listing for an object store."""
    return PartIndex(Path(store.path("trajectories"))) if store.local else StorePartIndex(store)
