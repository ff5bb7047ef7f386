"""A run's lifecycle in its store, recorded one way by skyrl-nb's engine and by the SkyRL bridge alike.

    pending ──running (+ heartbeat every few seconds)──▶ succeeded | stopped | failed
               started event (step 0) / resumed event              finished event | error event
                                         ▲
    failed, under trainer.max_restarts ──┘ restarted event (the restart supervisor, skyrl_engine.supervisor)

:class:`RunLifecycle` holds the run's :class:`~skyrl_core.runs.RunWriter`: it sets the status under one lock (the
training thread and the heartbeat thread both write it), keeps a heartbeat while the run trains, so a reader can
tell a live run from a lost one, and records the end exactly once. A failure goes through
``RunWriter.record_failure``, which says whether a resume can help.
"""

from __future__ import annotations

import html
import os
import threading
import time
from typing import Any

from skyrl_core.choices import RunState
from skyrl_core.resume import supervisor_pid
from skyrl_core.runs import RunWriter

HEARTBEAT_S = 5.0
#: while a run trains, a new step alone rewrites status.json at most this often; the heartbeat carries the latest
STEP_STATUS_S = 1.0


class RunLifecycle:
    """The lifecycle of the run that ``writer`` writes. ``step`` is the last step reported; ``ended`` the final
    state once recorded (None while the run lives).

    >>> life = RunLifecycle(RunWriter("/tmp/runs/demo"))          # doctest: +SKIP
    >>> life.running(step=0, total_steps=10); life.started(total_steps=10)  # doctest: +SKIP
    >>> life.running(step=1); life.succeeded(); life.close()      # doctest: +SKIP
    """

    def __init__(self, writer: RunWriter, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.writer = writer
        self.step = 0
        self.ended: str | None = None
        self.heartbeat_s = heartbeat_s
        self._lock = threading.Lock()
        self._stop_beat = threading.Event()
        self._beat: threading.Thread | None = None
        self._written = float("-inf")  # time.monotonic() of the last status.json write

    def status(self, state: str | None = None, **fields: Any) -> None:
        """Update status.json (``state`` None: only the heartbeat and the given fields)."""
        with self._lock:
            self.writer.set_status(state, **fields)
            self._written = time.monotonic()

    def running(self, step: int | None = None, **fields: Any) -> None:
        """The run trains (at ``step``); the first call starts the heartbeat and records the job's pid: this
        process's, or under the restart supervisor the supervisor's, which lives across restarts.

        A call that only moves the step writes status.json when the last write is ``STEP_STATUS_S`` old: a
        step of the tiny model is 40 ms, a write 0.9 ms (an upload on an object store). The heartbeat writes
        the latest step; an end (succeeded, stopped, failed) writes it at once.
        """
        if step is not None:
            self.step = int(step)
            if (not fields and self._beat is not None and self.writer.state == RunState.RUNNING
                    and time.monotonic() - self._written < STEP_STATUS_S):
                return
            fields["step"] = self.step
        if self._beat is None:
            fields.setdefault("pid", supervisor_pid() or os.getpid())
        self.status(RunState.RUNNING, **fields)
        if self._beat is None:
            self._beat = threading.Thread(target=self._heartbeat_loop, name="run-store-heartbeat", daemon=True)
            self._beat.start()

    def started(self, total_steps: int | None, **info: Any) -> None:
        """The ``started`` event of a run that begins at step 0 (``info``: what the dashboard shows of it)."""
        self.writer.log_event("started", step=0, total_steps=total_steps, **info)

    def resumed(self, from_step: int, attempt: int, **info: Any) -> None:
        """The ``resumed`` event: training continues after ``from_step`` (0: a resubmission that starts over),
        on the run's ``attempt``-th resume."""
        self.writer.log_event("resumed", step=int(from_step), from_step=int(from_step), attempt=int(attempt), **info)

    def restarted(self, from_step: int, attempt: int, error: str, error_kind: str, **info: Any) -> None:
        """The ``restarted`` event: the run failed with ``error`` (one line; ``error_kind``: a resumable
        ``skyrl_core.failures.FailureKind``) and the restart supervisor starts its trainer again, the
        ``attempt``-th time, from the checkpoint of ``from_step`` (0: from the start). Its step is ``from_step``, so
        the resume's ``truncate_after`` keeps it."""
        self.writer.log_event("restarted", step=int(from_step), from_step=int(from_step), attempt=int(attempt),
                              error=error, error_kind=error_kind, **info)

    def succeeded(self) -> None:
        """The run trained every step: status succeeded and a ``finished`` event (once)."""
        if self._end(RunState.SUCCEEDED):
            self.writer.log_event("finished", step=self.step, state=RunState.SUCCEEDED.value)

    def stopped(self) -> None:
        """A requested stop: status stopped and a ``finished`` event (once)."""
        if self._end(RunState.STOPPED):
            self.writer.log_event("finished", step=self.step, state=RunState.STOPPED.value)

    def failed(self, err: BaseException, traceback: str | None = None, *, final: bool = True) -> None:
        """The run failed with ``err``: an ``error`` event with the traceback and status failed, both saying
        whether a resume can help (``RunWriter.record_failure``); once. ``final`` False: the event only, the
        restart supervisor decides what the status becomes."""
        if self.ended is None:
            self.close()
            self.ended = RunState.FAILED
            with self._lock:
                self.writer.record_failure(err, self.step, traceback, final=final)

    def refused(self, message: str) -> None:
        """The run could not start (one line: a refused config, a missing package): status failed, an error event."""
        if self._end(RunState.FAILED, error=message):
            self.writer.log_event("error", step=self.step, error=message)

    def close(self) -> None:
        """Stop the heartbeat (and wait for its thread: a daemon thread still alive when the interpreter
        finalises is unwound by force, which aborts the process)."""
        self._stop_beat.set()
        if self._beat is not None and self._beat is not threading.current_thread():
            self._beat.join(timeout=self.heartbeat_s + 5.0)

    def _end(self, state: RunState, **fields: Any) -> bool:
        if self.ended is not None:
            return False
        self.close()
        self.ended = state
        self.status(state, step=self.step, **fields)
        return True

    def _heartbeat_loop(self) -> None:
        while not self._stop_beat.wait(self.heartbeat_s):
            try:
                self.status(step=self.step)
            except OSError:  # a store that hiccups: the next beat tries again
                pass

    def __repr__(self) -> str:
        return f"RunLifecycle(run_dir={str(self.writer.run_dir)!r}, step={self.step}, ended={self.ended!r})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"
