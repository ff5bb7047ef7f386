"""The engine's side of ``trainer.alerts``: a run's failure, a stall and a reward collapse, seen in the driver.

- ``failed``: :meth:`RunAlerts.failed`, called where the run records its failure; sent before the job exits.
- ``stalled``: a watch thread wakes every second; once at least ``MIN_INTERVALS`` steps have finished in this
  attempt, no step for ``stall_factor`` x the median time between steps (and at least ``stall_min_s``) is a stall
  of the step after the last one. A step that arrives later re-arms it for the next. Time the driver spends in a
  phase that is long by design (``EXCUSED``: an evaluation, a checkpoint, as ``busy`` reports it: the trainer's
  telemetry phases) does not count: the quiet time is measured from the end of such a phase.
- ``reward_collapse``: the mean of ``reward/avg_raw_reward`` over the last ``reward_window`` steps under
  ``reward_below`` (checked once the window is full); a mean back at or above it re-arms it.

Each alert is sent once per run (``skyrl_core.alerts``: its key is kind and step, recorded as an ``alert`` event).
A resumed run reads the keys already sent and replays the reward window over the rows it keeps, so it neither
repeats an alert nor misses a collapse that spans the resume. ``lost`` is the notebook's to send (a process
cannot report its own death).

Nothing here blocks a step: stall and collapse alerts go out from a sender thread with ``timeout_s`` on each
request, and their events are written by the training thread (the run store has one writer) at its next step or
when the run ends. A send that fails is a ``warning`` event and a log line; it never fails the run.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from skyrl_core.alerts import AlertError, alert_key, alert_text, describe, resolve, send, sent_keys
from skyrl_core.choices import AlertKind, Phase
from skyrl_core.metric_names import REWARD_KEY

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_core.runs import RunWriter

#: Steps that must finish in this attempt before a stall can be called (the first ones load and warm up).
MIN_INTERVALS = 3
#: How often the watch thread looks (seconds).
CHECK_S = 1.0
#: Phases that take many steps' time by design: no stall is called while the driver is in one.
EXCUSED = frozenset({Phase.EVAL, Phase.CHECKPOINT})


class RunAlerts:
    """The alerts of one run in its driver (see the module docstring); :meth:`start` makes one when
    ``trainer.alerts.webhook`` is set. ``sent`` holds the keys sent for this run, in this attempt or before.

    >>> alerts = RunAlerts.start(cfg, writer, start_step=0)     # doctest: +SKIP
    >>> writer.metric_listeners.append(alerts.observe)          # doctest: +SKIP
    >>> alerts.stop()                                           # doctest: +SKIP
    """

    def __init__(self, cfg: JobConfig, writer: RunWriter, destination: str, start_step: int = 0,
                 send_fn: Callable[[str, str, str, float], None] = send, clock: Callable[[], float] = time.monotonic,
                 phases: Callable[[], Iterable[str]] = tuple):
        from skyrl_core.runs import RunReader

        a = cfg.trainer.alerts
        self.settings = a
        self.run_id = str(cfg.run.run_id)
        self.run_dir = str(writer.run_dir)
        self.writer = writer
        self.destination = destination
        self.where = describe(str(a.webhook), destination)
        self.kinds = {AlertKind(k) for k in a.events}
        self._send, self._clock, self._phases = send_fn, clock, phases
        reader = RunReader(writer.run_dir)
        self.sent: set[str] = sent_keys(reader.events())
        self.last_step = start_step
        self._last_at = clock()
        self._intervals: deque[float] = deque(maxlen=50)
        self._steps_here = 0
        self._rewards: deque[float] = deque(maxlen=a.reward_window)
        self._collapsed = False
        self._records: deque[tuple[str, dict[str, Any]]] = deque()  # events for the training thread to write
        self._outbox: queue.Queue[tuple[str, int, str, str, str] | None] = queue.Queue()
        for row in reader.metrics():  # a resume: the window as the kept rows leave it, nothing sent for them
            if isinstance(row.get("step"), int) and row["step"] <= start_step:
                self._reward_check(row["step"], row, replay=True)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._watch, name="alerts-watch", daemon=True),
                         threading.Thread(target=self._sender, name="alerts-send", daemon=True)]
        for thread in self._threads:
            thread.start()

    @classmethod
    def start(cls, cfg: JobConfig, writer: RunWriter, start_step: int = 0,
              environ: Mapping[str, str] | None = None,
              phases: Callable[[], Iterable[str]] = tuple) -> RunAlerts | None:
        """The run's alerts, or None when ``trainer.alerts.webhook`` is unset, or (with a ``warning`` event and a
        log line) when its ``env:`` variable is missing here: the run goes on without alerts. ``phases`` says what
        the driver is doing now (the trainer's ``telemetry.phases``): no stall is called during an ``EXCUSED`` one."""
        webhook = cfg.trainer.alerts.webhook
        if webhook is None:
            return None
        try:
            destination = resolve(webhook, environ)
        except AlertError as err:
            _say(f"warning: alerts are off: {err}")
            writer.log_event("warning", step=start_step, message=f"alerts are off: {err}")
            return None
        alerts = cls(cfg, writer, destination, start_step, phases=phases)
        _say(f"alerts: {', '.join(sorted(alerts.kinds))} to {alerts.where}")
        return alerts

    # -- what the trainer calls ------------------------------------------------------------------
    def observe(self, step: int, row: dict[str, Any]) -> None:
        """One step's metrics line was written (a ``RunWriter.metric_listeners`` callback): note its time and
        reward, and write the events the threads left."""
        now = self._clock()
        if self._steps_here:
            self._intervals.append(now - self._last_at)
        self._steps_here += 1
        self.last_step, self._last_at = step, now
        self._reward_check(step, row)
        self.write_events()

    def failed(self, err: BaseException, step: int) -> None:
        """The run failed in ``step``: send the alert now (at most ``timeout_s``), then write what is pending."""
        self.stop()
        detail = f"{type(err).__name__}: {err}".strip().splitlines()[0] if str(err) else type(err).__name__
        message = self._claim(AlertKind.FAILED, step, detail[:500])
        if message is not None:
            self._deliver(*message)
        self.write_events()

    def stop(self) -> None:
        """Stop watching (the run has ended), let the sender finish what it holds, write the pending events."""
        if not self._stop.is_set():
            self._stop.set()
            self._outbox.put(None)
            for thread in self._threads:
                thread.join(timeout=self.settings.timeout_s + 5.0)
        self.write_events()

    def write_events(self) -> None:
        """Write the ``alert`` / ``warning`` events of sends done so far (the training thread's job)."""
        while self._records:
            kind, data = self._records.popleft()
            self.writer.log_event(kind, **data)

    # -- the checks ---------------------------------------------------------------------------------
    def _reward_check(self, step: int, row: Mapping[str, Any], replay: bool = False) -> None:
        reward = row.get(REWARD_KEY)
        threshold = self.settings.reward_below
        if threshold is None or not isinstance(reward, (int, float)) or isinstance(reward, bool):
            return
        self._rewards.append(float(reward))
        if len(self._rewards) < self._rewards.maxlen:
            return
        mean = sum(self._rewards) / len(self._rewards)
        if mean >= threshold:
            self._collapsed = False
        elif not self._collapsed:
            self._collapsed = True
            if not replay:
                self._queue(AlertKind.REWARD_COLLAPSE, step,
                            f"the mean reward of steps {step - len(self._rewards) + 1}-{step} is {mean:.4g}, under "
                            f"trainer.alerts.reward_below={threshold:g}")

    def stall_limit(self) -> float | None:
        """Seconds without a step that make a stall now; None until ``MIN_INTERVALS`` steps finished here."""
        if len(self._intervals) < MIN_INTERVALS - 1:
            return None
        return max(self.settings.stall_factor * statistics.median(self._intervals), self.settings.stall_min_s)

    def _watch(self) -> None:
        excused_until = float("-inf")  # when the driver was last seen in an EXCUSED phase
        while not self._stop.wait(CHECK_S):
            if EXCUSED.intersection(self._phases()):
                excused_until = self._clock()
                continue
            limit = self.stall_limit()
            if limit is None:
                continue
            quiet = self._clock() - max(self._last_at, excused_until)
            if quiet > limit:
                median = statistics.median(self._intervals)
                self._queue(AlertKind.STALLED, self.last_step + 1,
                            f"no step for {quiet:.0f} s (trainer.alerts.stall_factor={self.settings.stall_factor:g} x "
                            f"the median {median:.3g} s between steps, at least stall_min_s="
                            f"{self.settings.stall_min_s:g}); the last step was {self.last_step}")

    # -- sending ------------------------------------------------------------------------------------
    def _claim(self, kind: AlertKind, step: int, detail: str) -> tuple[str, int, str, str, str] | None:
        """The message to send for ``kind`` at ``step``, or None when it is not asked for or was sent."""
        key = alert_key(kind, step)
        if kind not in self.kinds or key in self.sent:
            return None
        self.sent.add(key)
        subject, text = alert_text(kind, self.run_id, step, detail, self.run_dir)
        return kind.value, step, key, subject, text

    def _queue(self, kind: AlertKind, step: int, detail: str) -> None:
        message = self._claim(kind, step, detail)
        if message is not None:
            self._outbox.put(message)

    def _sender(self) -> None:
        while (message := self._outbox.get()) is not None:
            self._deliver(*message)

    def _deliver(self, kind: str, step: int, key: str, subject: str, text: str) -> None:
        try:
            self._send(self.destination, subject, text, self.settings.timeout_s)
        except AlertError as err:
            _say(f"warning: {err}")
            self._records.append(("warning", {"step": step, "message": f"the {kind} alert was not sent: {err}"}))
            return
        _say(f"alert sent to {self.where}: {subject}")
        self._records.append(("alert", {"at_step": step, "alert": kind, "key": key, "to": self.where, "text": text}))

    def __repr__(self) -> str:
        return (f"RunAlerts(run_id={self.run_id!r}, to={self.where!r}, events={sorted(self.kinds)}, "
                f"sent={sorted(self.sent)})")

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"


def _say(text: str) -> None:
    print(f"[skyrl_engine] {text}", flush=True)
