"""The restart supervisor (``trainer.max_restarts``): a run that fails for a reason outside the user's code starts
again from its latest checkpoint by itself, with no notebook open (HyperPod's node recovery replaces a node and
expects the job to carry on).

``python -m skyrl_engine train`` with ``trainer.max_restarts`` > 0 runs :func:`supervise` instead of training: it
runs the trainer as a child process (``train --attempt N``, the same config and overrides), waits for it, and when
it ends non-zero asks :func:`skyrl_core.resume.decide_restart` whether to start it again. A child process because
one mechanism then covers every fault outside the user's code: a Ray actor, worker or node that died fails the
trainer with an error it records (``worker_died``), and a trainer killed by a signal (the OOM killer, ``kill -9``)
records nothing, so its exit status says it (:class:`TrainerDied`). Ray ends a driver's actors and placement groups
when the driver process exits, so the next trainer finds the cluster as the first did (its placement waits for the
bundles; the chaos test checks that nothing of a dead trainer is left).

What the run store shows:

- the supervised trainer writes its ``error`` event, not the ``failed`` status (``RunWriter.record_failure(final=
  False)``), so no reader takes a run about to restart for an ended one; status.json's ``pid`` is the supervisor's,
  alive across restarts;
- a restart: a ``restarted`` event (attempt, the failure's line and kind, the step it resumes from; ``RunLifecycle.
  restarted``), status ``running`` with ``restarts``; the new trainer resumes with ``trainer.resume_mode=latest``
  and drops what the failed attempt wrote after the checkpoint (``RunWriter.truncate_after``): each step once;
  its placement waits up to ``NODE_WAIT_S`` for the nodes it needs (``placement.wait_until_possible``): a lost
  node's replacement may still be joining;
- no restart: status ``failed`` with the failure (and its ``error`` event when the trainer could not write one), a
  ``warning`` saying why a resumable failure was not restarted, and the ``failed`` alert, once;
- a stop (SIGTERM or SIGINT to the supervisor, or the trainer's own stop) is never restarted. Ray's stop signals the
  supervisor and the trainer; the supervisor signals the trainer again a second later if it still runs.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from skyrl_core.choices import FINAL_STATES, RunState
from skyrl_core.failures import Failure, classify_failure, failure_of
from skyrl_core.resume import (
    ATTEMPT_ENV,
    NODE_WAIT_ENV,
    STOP_EXITS,
    SUPERVISOR_ENV,
    RestartDecision,
    attempt_from_env,
    checkpoint_root,
    decide_restart,
)
from skyrl_engine.alerts import RunAlerts

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig

EXIT_FAILED, EXIT_STOPPED = 1, 143
#: How long a restarted trainer waits for the nodes its placement needs (a lost node's replacement: HyperPod's
#: node recovery takes minutes) before its placement is refused, which ends the run.
NODE_WAIT_S = 1200.0
#: After a stop, how long the trainer has before the supervisor signals it again (Ray SIGKILLs the job after 3 s).
RESIGNAL_S = 1.0


class TrainerDied(RuntimeError):
    """A trainer process ended by a signal before it could record why (``skyrl_core.failures``: ``worker_died``)."""


@dataclass(frozen=True)
class AttemptEnd:
    """How one trainer process ended: its ``exit_code`` (negative: the signal), the failure's one ``line`` and
    :class:`~skyrl_core.failures.Failure`, its ``traceback``, and whether the trainer ``recorded`` it (its
    ``error`` event) or the supervisor must."""

    exit_code: int
    line: str | None = None
    failure: Failure | None = None
    traceback: str | None = None
    recorded: bool = False


def attempt_end(run_dir: str, exit_code: int, pid: int, since: float) -> AttemptEnd:
    """What the trainer process ``pid``, started at ``since`` (epoch seconds), left in the run's events when it
    exited with ``exit_code``: its newest ``error`` event, else what the exit itself says."""
    from skyrl_core.runs import RunReader

    if exit_code == 0:
        return AttemptEnd(0)
    errors = [e for e in RunReader(run_dir).events()
              if e.get("kind") == "error" and isinstance(e.get("time"), (int, float)) and e["time"] >= since - 1.0]
    if errors:
        event = errors[-1]
        line = str(event.get("error") or "").strip().splitlines()[-1:] or [""]
        status = {"error": line[0] or f"exit code {exit_code}", "error_kind": event.get("error_kind")}
        return AttemptEnd(exit_code, status["error"], failure_of(status), event.get("traceback"), recorded=True)
    if exit_code < 0:
        try:
            name = signal.Signals(-exit_code).name
        except ValueError:
            name = f"signal {-exit_code}"
        line = (f"TrainerDied: the trainer process (pid {pid}) was killed by {name} (exit code {exit_code}) "
                "before it could record why: the kernel's OOM killer, a kill, or the machine under it")
    else:
        line = f"TrainerExited: the trainer process (pid {pid}) exited with code {exit_code} without recording why"
    return AttemptEnd(exit_code, line, classify_failure(line))


class Supervisor:
    """Runs the trainer of ``cfg`` (``--config source`` and ``overrides``, as the job was started) until it
    succeeds, is stopped, or fails in a way :func:`~skyrl_core.resume.decide_restart` does not restart."""

    def __init__(self, source: str, overrides: list[str], cfg: JobConfig, log: Callable[[str], None] = print):
        self.source, self.overrides, self.cfg, self._log = source, list(overrides), cfg, log
        self.run_dir = str(cfg.run_dir)
        self.ckpt_root = checkpoint_root(cfg.trainer.ckpt_path, self.run_dir)
        self.max_restarts = int(cfg.trainer.max_restarts)
        self.first_attempt = attempt_from_env(0)  # a resubmission (Job.resume) counts on from its attempt
        self.restarts = 0
        self.stopping = False
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self, resume_latest: bool) -> list[str]:
        """The trainer's command line: this job's, as the supervisor's child, on the same run id."""
        return [sys.executable, "-m", "skyrl_engine", "train", "--config", self.source, "--attempt", str(self.restarts),
                *self.overrides, f"run.run_id={self.cfg.run.run_id}",
                *(["trainer.resume_mode=latest"] if resume_latest else [])]

    def run(self) -> int:
        """Supervise to the end; returns the job's exit code (the trainer's last one: 0, 1, 2 or 143)."""
        from skyrl_core.runs import RunWriter

        # pending, as the trainer would say at its start: an earlier job's final status (a resubmission) with a fresh
        # heartbeat would read as this job's end; and this job's restart count, not an earlier job's
        RunWriter(self.run_dir).set_status(RunState.PENDING, pid=os.getpid(), restarts=0, attempt=self.first_attempt)
        resume_latest = False
        while True:
            if self.stopping:
                self._record_stop()
                return EXIT_STOPPED
            env = {**os.environ, SUPERVISOR_ENV: str(os.getpid())}
            if self.restarts:
                env[ATTEMPT_ENV] = str(self.first_attempt + self.restarts)
                env[NODE_WAIT_ENV] = str(NODE_WAIT_S)
            started = time.time()
            self.proc = subprocess.Popen(self.command(resume_latest), env=env)
            if self.stopping:  # the stop came while it was being started: it had no signal of its own
                self._signal_trainer(self.proc)
            self._log(f"supervisor: trainer attempt {self.restarts} is pid {self.proc.pid} "
                      f"(trainer.max_restarts={self.max_restarts})")
            code = self.proc.wait()
            if code == 0:
                return 0
            end = attempt_end(self.run_dir, code, self.proc.pid, started)
            decision = decide_restart(code, end.failure, stopped=self.stopping, restarts_done=self.restarts,
                                      max_restarts=self.max_restarts, run_dir=self.run_dir, ckpt_root=self.ckpt_root,
                                      ckpt_interval=self.cfg.trainer.ckpt_interval)
            self._log(f"supervisor: the trainer ended with exit code {code}"
                      + (f" ({end.line})" if end.line else "") + f"; {decision.why}")
            if self.stopping or code in STOP_EXITS:
                self._record_stop()
                return EXIT_STOPPED
            if code == 2:
                return code
            if not decision.restart:
                self._record_failure(end, decision)
                return EXIT_FAILED
            self.restarts += 1
            self._record_restart(end, decision)
            resume_latest = decision.resume_latest

    def __repr__(self) -> str:
        trainer = f"pid {self.proc.pid}" if self.proc is not None and self.proc.poll() is None else "none running"
        return (f"Supervisor(run_id={self.cfg.run.run_id!r}, restarts={self.restarts}/{self.max_restarts}, "
                f"trainer: {trainer}{', stopping' if self.stopping else ''})")

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"

    # -- the run store ----------------------------------------------------------------------------------------
    # A fresh RunWriter each time: the trainer rewrote status.json since, and a writer keeps what it last read.
    def _record_restart(self, end: AttemptEnd, decision: RestartDecision) -> None:
        from skyrl_core.lifecycle import RunLifecycle
        from skyrl_core.runs import RunWriter

        writer = RunWriter(self.run_dir)
        kind = end.failure.kind.value if end.failure is not None else ""  # decide_restart needs one: always set
        RunLifecycle(writer).restarted(int(decision.from_step or 0), self.first_attempt + self.restarts,
                                       end.line or "", kind, restarts=self.restarts, exit_code=end.exit_code,
                                       traceback=end.traceback)
        writer.set_status(RunState.RUNNING, pid=os.getpid(), restarts=self.restarts,
                          attempt=self.first_attempt + self.restarts)

    def _record_failure(self, end: AttemptEnd, decision: RestartDecision) -> None:
        """The final ``failed`` status (the trainer left it to this supervisor), why a resumable failure was not
        restarted, and the failure alert."""
        from skyrl_core.runs import RunWriter

        writer = RunWriter(self.run_dir)
        step = _step(self.run_dir)
        failure = end.failure or classify_failure(end.line or "")
        line = end.line or f"the trainer exited with code {end.exit_code}"
        if not end.recorded:
            writer.log_event("error", step=step, error=line, traceback=None, **failure.fields())
        if failure.resumable and self.max_restarts:
            why = decision.why.removeprefix("not restarted: ")
            writer.log_event("warning", step=step, message=f"the run was not restarted: {why}")
        writer.set_status(RunState.FAILED, error=line, step=step, **failure.fields())
        self._alert_failure(writer, line, step)

    def _record_stop(self) -> None:
        """A stop the trainer could not record (it was stopped before its handler, or between attempts)."""
        from skyrl_core.runs import RunWriter

        writer = RunWriter(self.run_dir)
        if writer.state in FINAL_STATES:
            return
        step = _step(self.run_dir)
        writer.set_status(RunState.STOPPED, step=step)
        writer.log_event("finished", step=step, state=RunState.STOPPED.value)

    def _alert_failure(self, writer: Any, line: str, step: int) -> None:
        """``trainer.alerts``' failure message, sent here once for the failure not restarted (the supervised
        trainer sends none: a restarted failure is not the run's end)."""
        alerts = RunAlerts.start(self.cfg, writer, step)
        if alerts is not None:
            alerts.failed(_as_error(line), step + 1)

    # -- signals ----------------------------------------------------------------------------------------------
    def on_signal(self, signum: int, frame: Any) -> None:
        """A stop: no restart from now on, and SIGTERM to the trainer after ``RESIGNAL_S`` if it still runs (Ray's
        stop signalled it already, and then it is usually gone; a stop raised where Python ignores exceptions, in
        a ``__del__``, is lost, and the second one stops it before Ray's SIGKILL)."""
        self.stopping = True
        proc = self.proc
        if proc is not None and proc.poll() is None:
            timer = threading.Timer(RESIGNAL_S, self._signal_trainer, args=(proc,))
            timer.daemon = True
            timer.start()

    @staticmethod
    def _signal_trainer(proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            try:
                proc.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass


def _step(run_dir: str) -> int:
    """The step status.json has now (the trainer's last)."""
    from skyrl_core.runs import RunReader

    step = RunReader(run_dir).status().get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else 0


def _as_error(line: str) -> BaseException:
    """An exception that prints as ``line`` (``TypeName: message``), for the alert's text."""
    name, sep, message = line.partition(": ")
    if sep and name.isidentifier():
        return type(name, (RuntimeError,), {})(message)
    return TrainerDied(line)


def supervise(source: str, overrides: list[str], cfg: JobConfig, log: Callable[[str], None] = print) -> int:
    """Run the trainer of ``cfg`` under a :class:`Supervisor` (``trainer.max_restarts`` > 0); the job's exit code."""
    supervisor = Supervisor(source, overrides, cfg, log)
    previous = {sig: signal.signal(sig, supervisor.on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    log(f"supervisor: run {cfg.run.run_id}, up to {supervisor.max_restarts} restart(s) after a failure outside "
        "the run's code")
    try:
        return supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
