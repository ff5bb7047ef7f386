"""Watching a local Ray head start: the stages it reaches (GCS, raylet, dashboard, the Jobs API) with their times for
a person to read, and the first line of its logs that says why it failed, found while it fails."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from skyrl_core import procs
from skyrl_core.frontend import widget_frontend

_SOCKET_TOO_LONG = re.compile(r"validate_socket_filename failed.*")


_PY_ERROR = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:?.*$")


_CPP_FATAL = re.compile(r"Check failed.*|^\[[^\]]* [CF] \d+ \d+\].*")


_MODULE_FAILED = re.compile(r"Module (\w+) failed to start")


#: Causes another try cannot cure.
_FOR_GOOD = ("validate_socket_filename", "ValueError", "PermissionError", "ImportError", "ModuleNotFoundError",
             "No space left")


#: Tries at most, when a daemon dies of something another try may cure (a busy machine).
START_ATTEMPTS = 3


def _daemon(args: list[str]) -> str | None:
    """Which of the head's vital daemons a command line is: gcs_server, raylet, dashboard, or None."""
    if not args:
        return None
    exe = os.path.basename(args[0])
    if exe in ("gcs_server", "raylet"):
        return exe
    if any(arg.endswith(os.path.join("dashboard", "dashboard.py")) for arg in args[1:3]):
        return "dashboard"
    return None


def _tail_text(path: Path, limit: int = 65536) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _last_line(path: Path, pattern: re.Pattern[str]) -> str | None:
    """The last line of `path`'s tail that `pattern` finds, as found (a line of a traceback, a glog line)."""
    for line in reversed(_tail_text(path).splitlines()):
        m = pattern.search(line.strip())
        if m:
            return " ".join(m.group(0).split())[:400]
    return None


class _StartWatch:
    """The head's vital daemons and Ray's logs while `ray start` (pid `pid`) brings a head up in `temp`."""

    def __init__(self, temp: Path, pid: int) -> None:
        self.temp = temp
        self.pid = pid
        self.seen: set[tuple[str, int]] = set()

    def logs_dir(self) -> Path | None:
        """`<temp>/session_<date>_<time>_<usec>_<pid>/logs`: `ray start` names the session after itself."""
        for session in self.temp.glob(f"session_*_{self.pid}"):
            return session / "logs"
        return None

    def dead_daemon(self) -> str | None:
        """The name of a vital daemon that was seen running and is gone (or a zombie) now."""
        self.seen |= {(name, pid) for pid in procs.process_group(self.pid)
                      if (name := _daemon(procs.cmdline(pid))) is not None}
        return next((name for name, pid in sorted(self.seen) if procs.started_at(pid) is None), None)

    def socket_refused(self) -> tuple[str, Path] | None:
        """Ray's 'validate_socket_filename failed' line and its log, if any daemon wrote one."""
        logs = self.logs_dir()
        if logs is None:
            return None
        for path in sorted(logs.glob("*.err")) + sorted(logs.glob("dashboard*.log")):
            line = _last_line(path, _SOCKET_TOO_LONG)
            if line:
                return line, path
        return None

    def cause(self, dead: str | None) -> tuple[str, Path] | None:
        """The line of Ray's logs that says why the head cannot come up, and the log it is in."""
        found = self.socket_refused()
        logs = self.logs_dir()
        if found or logs is None:
            return found
        if dead == "dashboard":
            line = _last_line(logs / "dashboard.err", _PY_ERROR)
            module = _MODULE_FAILED.search(line or "")
            if module:  # the module's own log holds the root cause
                for path in (logs / f"dashboard_{module.group(1)}.err", logs / f"dashboard_{module.group(1)}.log"):
                    root = _last_line(path, _PY_ERROR)
                    if root:
                        return root, path
            return (line, logs / "dashboard.err") if line else None
        for name in ([dead] if dead else ["raylet", "gcs_server"]):
            for path in (logs / f"{name}.out", logs / f"{name}.err"):
                line = _last_line(path, _CPP_FATAL)
                if line:
                    return line, path
        return None

    def describe(self, dead: str | None) -> str:
        """One line: the cause quoted with its log, else which daemon died and where the logs are."""
        found = self.cause(dead)
        if found:
            return f"{found[0]} (log: {found[1]})"
        what = f"its {dead} process exited" if dead else "no error in Ray's logs"
        return f"{what} (logs: {self.logs_dir() or self.temp})"


class StartProgress:
    """What `local()` says while a head starts: each stage with the seconds since the start, as a small
    widget where a widget front end draws it (its clock ticks while it waits), else one line of text per
    stage (``local Ray head: raylet up (3.1 s)``; papermill keeps them in the output). ``enabled=False``:
    nothing is said."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.started = time.monotonic()
        self.stages: list[tuple[str, float]] = []
        self.mode = None if enabled is False else ("widget" if widget_frontend() else "text")
        self._view: Any = None
        self._drawn = 0.0

    def seconds(self) -> float:
        """Seconds since the start."""
        return time.monotonic() - self.started

    def stage(self, text: str) -> None:
        """Say that the head reached ``text`` (``raylet up``)."""
        self.stages.append((text, self.seconds()))
        if self.mode == "text":
            print(f"local Ray head: {text} ({self.stages[-1][1]:.1f} s)", flush=True)
        self._draw(force=True)

    def tick(self) -> None:
        """Let the widget's clock move on (at most once a second)."""
        self._draw()

    def done(self, text: str, ok: bool = True) -> None:
        """The last stage: up (``ok``), or why not."""
        self.stage(text)
        self._draw(force=True, done=True, ok=ok)

    def _draw(self, force: bool = False, done: bool = False, ok: bool = True) -> None:
        if self.mode != "widget" or (not force and time.monotonic() - self._drawn < 1.0):
            return
        self._drawn = time.monotonic()
        from skyrl_widgets.cluster_panel import start_progress_html

        html_text = start_progress_html("local Ray head", self.stages, self.seconds(), done=done, ok=ok)
        if self._view is None:
            import ipywidgets
            from IPython.display import display

            self._view = ipywidgets.HTML(html_text)
            display(self._view)
        else:
            self._view.value = html_text
