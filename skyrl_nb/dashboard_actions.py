"""What a person can do with a dashboard's job: Stop, Resume (or, where resuming cannot help, New run, with the
reason beside the state), Logs, and the links to the job in Ray's dashboard. A mixin of
:class:`skyrl_nb.dashboard.Dashboard`: it reads the dashboard's ``job``, ``state`` and ``finished`` and calls its
``_render``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from skyrl_core.choices import RunState
from skyrl_nb.jobs import LOST
from skyrl_nb.run_series import RunSeries

# states after which a run may continue (Resume), or says why it cannot (the header's note, New run)
RESUMABLE_STATES = (RunState.STOPPED, RunState.FAILED, LOST)


def reader_for(source: Any) -> tuple[Any, Any]:
    """(RunReader, Job or None) for a Job, a RunReader, or a run directory path."""
    from skyrl_core.runs import RunReader

    if hasattr(source, "submission_id") and hasattr(source, "run_dir"):
        return RunReader(source.run_dir), source
    if isinstance(source, RunReader):
        return RunReader(source.run_dir), None
    return RunReader(os.fspath(source)), None


class JobSteering:
    """The job actions of :class:`skyrl_nb.dashboard.Dashboard` (see the module docstring)."""

    def _resume_problem(self) -> str | None:
        """`Job.resume_problem()` once per ended job (it asks Ray and reads the run store); None when the job
        cannot say (a stand-in without it, Ray unreachable) or cannot say yet: right after a stop Ray may still
        report the job running (`Job.resume_check`), an answer that is asked again on the next refresh."""
        key = (getattr(self.job, "submission_id", None), str(self.state))
        if self._resume_checked is None or self._resume_checked[0] != key:
            check = getattr(self.job, "resume_check", None)
            try:
                problem, final = check() if callable(check) else (None, True)
            except Exception:  # Ray unreachable: let the button try, and say why it failed then
                problem, final = None, True
            if not final:
                return None
            self._resume_checked = (key, problem)
        return self._resume_checked[1]

    def stop_job(self) -> bool:
        """Ask Ray to stop the job the dashboard follows (the Stop button); True if it was running."""
        stopped = bool(self._steer("stopping…", "nothing to stop", lambda job: job.stop()))
        self._job_checked = 0.0  # ask Ray at the next refresh
        self.start()
        return stopped

    def resume_job(self) -> Any:
        """Resubmit the run from its latest checkpoint (the Resume button, `Job.resume`) and follow the new job.

        The run store says `stopped` a moment before Ray has seen the job's process exit: Ray is given up to
        30 s to agree before the resubmission."""
        def resume(job: Any) -> Any:
            job.wait(timeout=30, poll_s=0.5)
            return job.resume()

        job = self._steer("resuming…", "resume it with cluster.launch(...) or %skyrl resume", resume)
        with self._lock:
            self.job, self._job_verdict, self._job_checked = job, None, 0.0
            self.state, self.error, self.started_at, self.ended_at = RunState.PENDING, None, None, None
        self.start()
        return job

    def restart_job(self) -> Any:
        """Launch the run's config again as a new run (the New run button, `Job.restart_as_new`) and follow it:
        what the header offers where a resume would overwrite history. The old run's files stay as they are."""
        job = self._steer("starting a new run…", "launch it with cluster.launch(...)", lambda job: job.restart_as_new())
        with self._lock:
            self.reader, self.job = reader_for(job)
            self.series, self._job_verdict, self._job_checked, self._resume_checked = RunSeries(), None, 0.0, None
            self.state, self.step, self.error, self.started_at, self.ended_at = RunState.PENDING, 0, None, None, None
        self.start()
        return job

    def _steer(self, busy: str, otherwise: str, act: Callable[[Any], Any]) -> Any:
        """``act(job)`` with the header saying ``busy`` meanwhile; RuntimeError for a dashboard of a run directory."""
        if self.job is None:
            raise RuntimeError(f"run {self.reader.run_id}: this dashboard follows a run directory, not a job; "
                               f"{otherwise}")
        self._busy = busy
        self._render()
        try:
            return act(self.job)
        finally:
            self._busy = ""

    def _action(self, name: str) -> None:
        try:
            if name == "stop":
                self.stop_job()
            elif name == "resume":
                self.resume_job()
            elif name == "new_run":
                self.restart_job()
            elif name == "logs":
                self._logs_read = 0.0
        except Exception as exc:  # a button press must say why it did nothing, not raise into the comm
            from skyrl_core.resume import ResumeRefused

            self.error = str(exc) if isinstance(exc, ResumeRefused) else f"{name}: {type(exc).__name__}: {exc}"
        self._render()

    def _actions(self) -> list[str]:
        if self.job is None:
            return []
        if not self.finished:
            return ["stop", "logs"]
        if self.state not in RESUMABLE_STATES:
            return ["logs"]
        # Resume only where it continues the run: else the reason is the header's note, and a new run is offered
        return ["new_run", "logs"] if self._resume_problem() else ["resume", "logs"]

    def _links(self) -> list[dict[str, str]]:
        if self.job is None:
            return []
        base = str(getattr(self.job.cluster, "dashboard_url", "") or "").rstrip("/")
        if not base:
            return []
        link = {"label": "Ray job ↗", "href": f"{base}/#/jobs/{self.job.submission_id}",
                "title": f"submission {self.job.submission_id} in Ray's dashboard (its logs, its workers)"}
        if callable(getattr(self.job.cluster, "dashboard_token", None)):  # a local head: its token is ours to give
            link["hint"] = "Ray asks for a token: run cluster.dashboard_token() in a cell"
            link["title"] += ("; Ray's dashboard asks for this cluster's token: run cluster.dashboard_token() in a "
                              "cell and paste what it returns")
        return [link]

    def _details(self) -> list[list[str]]:
        if self.with_charts or self.job is None:
            return []
        rows = [["submission", self.job.submission_id], ["run dir", str(self.job.run_dir)],
                ["cluster", str(getattr(self.job.cluster, "name", ""))]]
        return rows
