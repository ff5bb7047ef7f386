"""A training job on a Ray cluster: one Jobs API submission plus the run directory it writes.

A `Job` is as thin as Ray's own job SDK: `status()`, `logs()`, `stop()`, `wait()` are one call
each; `resume()` resubmits the same run with `trainer.resume_mode=latest` under a new submission
id (`<run_id>-r1`, `-r2`, ...); `.run` reads the run store the engine writes; `export()` writes a
checkpoint as a Hugging Face model directory.

A job killed without a word (kill -9, out of memory) leaves a `status.json` that still says
`running`. `status()` reports such a job as `lost` as soon as its death is known: Ray says the job
failed, or, on a cluster on this machine, the engine's pid recorded in `status.json` is gone; it does
not wait for the heartbeat to go stale.

One idea, a job as the notebook holds it (its state, logs, stop, resume, export); its length is the states a job
ends in and what each allows next.
"""

from __future__ import annotations

import html
import os
import re
import threading
import time
from dataclasses import KW_ONLY, dataclass, field
from typing import TYPE_CHECKING, Any

from skyrl_core import procs
from skyrl_core.choices import FINAL_STATES, ReadState, RunState

if TYPE_CHECKING:
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.dashboard import Dashboard


#: A run whose status.json says running while its process is known to be dead (see `Job.status`).
LOST = ReadState.LOST.value
#: The states after which a job does nothing more: Ray's final ones and `lost`.
ENDED = frozenset({*FINAL_STATES, LOST})
#: How a refused resume says to start over instead (`Job.restart_as_new`).
RESTART_HINT = "job.restart_as_new()"


def process_gone(run_status: dict[str, Any]) -> str | None:
    """Why the process named by a run's status.json is not running any more, or None.

    Only meaningful where that process ran on this machine. A pid now held by a process that started
    after the run's last heartbeat is another process: the run's is gone. None when this machine
    cannot tell (no ``/proc``) or status.json names no pid.
    """
    pid = run_status.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0 or not procs.can_see_processes():
        return None
    started = procs.started_at(pid)
    beat = run_status.get("heartbeat")
    if started is None:
        return f"its process (pid {pid}) is gone"
    if isinstance(beat, (int, float)) and started > beat + 2.0:  # /proc's start time is good to ~1 s
        return f"its process (pid {pid}) is gone; that pid now belongs to another process"
    return None


def _ray_reason(message: Any, log_tail: str) -> str:
    """One line from Ray's job message and the job's log: the message's first line (``Job entrypoint command
    failed with exit code 1``, ``runtime_env setup failed: ...``) and the last error line of the log (the
    message's own copy of the log, else ``log_tail``), at most 300 characters."""
    text = str(message or "")
    first, _, rest = text.partition("\n")
    first = first.split(", last available logs")[0].strip()
    lines = [line.strip() for line in (rest or log_tail).splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception|Interrupt|Exit)\b", line)]
    last = (errors or lines or [""])[-1]
    said = "; ".join(part for part in (first, f"last log line: {last}" if last and last != first else "") if part)
    said = " ".join(said.split()) or "Ray gave no reason"
    return said if len(said) <= 300 else said[:297] + "..."


def run_state(ray_status: Any) -> str:
    """Ray's job status (``JobStatus.SUCCEEDED`` or ``"SUCCEEDED"``) as a run state: ``RunState.SUCCEEDED``.

    A status this code does not know is returned lower-cased, as Ray says it.
    """
    name = str(getattr(ray_status, "value", ray_status)).lower()
    try:
        return RunState(name)
    except ValueError:
        return name


@dataclass(eq=False, repr=False)
class Job:
    """One submission of a run to a cluster (see `Cluster.launch`).

    `runtime_env` is what `launch` was given and `code` how the engine's code reached the job
    (`skyrl_nb.cluster.shipping.EngineCode`; a resume submits with both again); `attempt` counts
    resumes (0 for the first launch). `run_dir` is a local path or an object-store URL.
    """

    cluster: Cluster
    _: KW_ONLY
    submission_id: str
    run_id: str
    run_dir: str
    attempt: int = 0
    runtime_env: dict[str, Any] | None = None
    code: Any = None
    _info: Any = None
    _reader: Any = field(default=None, init=False)
    _early_reason: str | None = field(default=None, init=False)
    _lost_told: bool = field(default=False, init=False)

    # -- the Jobs API ---------------------------------------------------------------------------

    def info(self) -> Any:
        """Ray's `JobDetails` for this submission (status, message, start/end times)."""
        self._info = self.cluster.client.get_job_info(self.submission_id)
        return self._info

    def status(self) -> str:
        """`pending`, `running`, `succeeded`, `failed` or `stopped` (Ray's job status, lower case), or `lost`.

        `lost`: the run's status.json still says running, but Ray says the job failed, or (a cluster on
        this machine) the engine's process is gone. `status_detail()` also says why.
        """
        return self.status_detail()[0]

    def status_detail(self) -> tuple[str, str | None]:
        """``(state, why)``: `status()`, with why a job is `lost`, failed or ended before the engine started.

        A job whose run never got past ``pending`` (its driver killed, an import error, a bad entrypoint, a
        runtime env that could not be set up) is `failed` (or `stopped`) with the reason Ray gives (its
        message and the last line of the job's log), and that is written through to the run's status.json
        when this notebook can write there, so `list_runs` agrees; a status the engine wrote is never
        overwritten.
        """
        info = self.info()
        state = run_state(info.status)
        if state not in (RunState.RUNNING, *FINAL_STATES):
            return state, None
        run = self._run_status()
        recorded = run.get("state")
        if state in FINAL_STATES and (recorded in (None, RunState.PENDING) or not self.owns_status(run)):
            return self._ended_early(info, state, run)
        if recorded != RunState.RUNNING:
            if state in FINAL_STATES and recorded in FINAL_STATES:
                state = run_state(recorded)  # how the run says it ended, as list_runs reads it
            return state, run.get("error") or (_ray_reason(info.message, "") if state == RunState.FAILED else None)
        if state == RunState.FAILED:
            said = f" ({_ray_reason(info.message, '')})" if info.message else ""
            return self._lost(f"Ray says the job failed{said}, but the run never recorded an end")
        if state != RunState.RUNNING:
            return state, None
        gone = process_gone(run) if self.cluster.runs_here else None
        return self._lost(gone) if gone else (state, None)

    def _lost(self, why: str) -> tuple[str, str]:
        """`lost` and why. The first time this Job finds it, the run's ``trainer.alerts`` hears of it, from a
        thread (a dashboard polls this): ``skyrl_core.alerts.alert_lost_run``, once per run and step, recorded in
        its events; its ``env:`` webhook resolved from the job's runtime env, else this kernel's environment."""
        if not self._lost_told:
            # urllib.request (and boto3 for SNS) only on this rare path
            from skyrl_core.alerts import alert_lost_run

            self._lost_told = True
            environ = {**os.environ, **((self.runtime_env or {}).get("env_vars") or {})}
            threading.Thread(target=alert_lost_run, args=(self.run_dir, why, environ), name="lost-alert",
                             daemon=True).start()
        return LOST, why

    def _ended_early(self, info: Any, state: str, run: dict[str, Any]) -> tuple[str, str | None]:
        """`status_detail` for a job Ray says ended while its run says nothing of this submission (``run``:
        status.json, {} when missing or unreadable)."""
        pending = run.get("state") == RunState.PENDING
        if state == RunState.SUCCEEDED and not pending:
            return state, None  # an unreadable store says nothing against Ray's word
        if state == RunState.STOPPED:
            final, why = RunState.STOPPED, "stopped before the engine started" if pending else None
        else:
            final = RunState.FAILED
            if self._early_reason is None:  # asked once: a dashboard polls every second
                try:
                    tail = self.logs(tail=40)
                except Exception:  # the logs are a nicety; Ray's message stands without them
                    tail = ""
                self._early_reason = _ray_reason(info.message, tail)
            why = self._early_reason
            if state == RunState.SUCCEEDED:
                why = f"the job's command exited 0 without the engine recording a start ({why})"
            why = f"the job ended before the engine recorded anything: {why}" if pending else why
        if pending and why:
            self._record_end(final, why)
        return final, why

    def _record_end(self, state: str, why: str) -> None:
        """Write ``state`` and ``why`` into the run's status.json while it still says ``pending`` (only the
        notebook, or an engine that died at once, wrote it); a store this notebook cannot write is left be."""
        from skyrl_core.runs import RunWriter

        try:
            writer = RunWriter(self.run_dir)
            if writer.state == RunState.PENDING:
                writer.set_status(state, error=why)
        except Exception:  # noqa: BLE001 - a read-only or unreachable store: status_detail still says why
            pass

    def owns_status(self, run_status: dict[str, Any]) -> bool:
        """Whether the run's status.json was written during this submission: after a resume, the earlier
        attempt's final status (its heartbeat older than this job's start) is not this job's word."""
        started_ms = getattr(self._info or self.info(), "start_time", None)
        beat = run_status.get("heartbeat")
        if not isinstance(started_ms, (int, float)) or not isinstance(beat, (int, float)):
            return True
        return beat * 1000 >= started_ms - 1000

    def _run_status(self) -> dict[str, Any]:
        """The run's status.json as a dict; {} when it is missing or unreadable."""
        if not self.run_dir:
            return {}
        try:
            status = self.run.status()
        except Exception:  # a damaged file or an unreachable store says nothing about the job
            return {}
        if not isinstance(status, dict) or status.get("heartbeat") is None:
            return {}  # no status.json (yet)
        return status

    def logs(self, tail: int | None = None) -> str:
        """The job's stdout/stderr so far; the last `tail` lines when given."""
        text = self.cluster.client.get_job_logs(self.submission_id)
        if tail is not None:
            lines = text.splitlines()
            text = "\n".join(lines[-tail:] if tail > 0 else [])
        return text

    def stop(self) -> bool:
        """Ask Ray to stop the job; True if it was running. The run store keeps what was written."""
        return bool(self.cluster.client.stop_job(self.submission_id))

    def wait(self, timeout: float | None = None, poll_s: float = 1.0) -> str:
        """Block until the job ends; returns its final state. Raises `TimeoutError` after `timeout` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.status()
            if state in ENDED:
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.submission_id} still {state} after {timeout} s")
            time.sleep(poll_s)

    def resume(self, overrides: list[str] | None = None) -> Job:
        """Resubmit this run from its latest checkpoint (`trainer.resume_mode=latest`), same run dir.

        The new submission id is `<run_id>-r<n>`. Stop the job first if it is still running. The config
        is the one this job was submitted with, read back from Ray's job info (no disk shared with the
        cluster is needed), else the run store's config.yaml. Refused (`ResumeRefused`, one line, nothing
        submitted or written) when resuming would overwrite history or fail again (`resume_problem`);
        `restart_as_new()` launches the same config as a new run instead.
        """
        from skyrl_core.config import check_config
        from skyrl_core.resume import ATTEMPT_ENV, ResumeRefused

        problem = self.resume_problem()
        if problem is not None:
            raise ResumeRefused(problem)
        attempts = [j.attempt for j in self.cluster.jobs() if j.run_id == self.run_id]
        attempt = max(attempts + [self.attempt]) + 1
        cfg = check_config(self.submitted_config(), ["trainer.resume_mode=latest", *(overrides or [])])
        code = self.code if self.code is not None else self.cluster.engine_code()
        runtime_env = dict(self.runtime_env or {})
        runtime_env["env_vars"] = {**(runtime_env.get("env_vars") or {}), ATTEMPT_ENV: str(attempt)}
        return self.cluster._submit(cfg, submission_id=f"{self.run_id}-r{attempt}", attempt=attempt,
                                    runtime_env=runtime_env, code=code)

    def resume_problem(self) -> str | None:
        """Why `resume()` would refuse, in one line, or None when it can resume. A job still running must be
        stopped first; a run that failed for a reason a resume repeats (a config error, an error in its code
        or data: `skyrl_core.resume.classify_failure`) is not resumed; nor is one with history but no
        checkpoint (a resume would start over and overwrite it)."""
        return self.resume_check()[0]

    def resume_check(self) -> tuple[str | None, bool]:
        """``(resume_problem(), final)``: ``final`` is False while Ray still reports the job running, an answer
        that changes once it ends (Ray's status lags a stop by a moment), True once the job has ended."""
        from skyrl_core.failures import failure_of
        from skyrl_core.resume import checkpoint_root, resume_problem

        state = self.status()
        if state not in ENDED:
            return f"job {self.submission_id} is {state}; stop() it before resume()", False
        run_status = self._run_status()
        failure = failure_of(run_status) if state == RunState.FAILED and self.owns_status(run_status) else None
        if failure is not None and not failure.resumable:
            error = str(run_status.get("error")).strip().splitlines()[-1][:200]
            return (f"run {self.run_id} failed with {error!r}: {failure.why}; fix the cause, then launch a new run: "
                    f"{RESTART_HINT}"), True
        try:
            trainer = self.submitted_config().get("trainer") or {}
        except RuntimeError as err:
            return str(err), True
        root = checkpoint_root(trainer.get("ckpt_path"), self.run_dir)
        if trainer.get("ckpt_path") and not self._sees_here(root):
            # trainer.ckpt_path on the cluster's own disk (the default is beside the run store, which the notebook
            # reads): this notebook cannot tell, and the engine refuses a resume that would overwrite history
            # before it writes anything
            return None, True
        return resume_problem(self.run_dir, root, trainer.get("ckpt_interval", "?"), instead=RESTART_HINT), True

    def _sees_here(self, path: str) -> bool:
        """Whether this notebook reads ``path`` as the cluster's jobs do: an object-store URL, a cluster on this
        machine, or a folder the cluster shares (``shared_paths``)."""
        from skyrl_core.store import is_url

        if is_url(path) or self.cluster is None or getattr(self.cluster, "runs_here", False):
            return True
        under_shared = getattr(self.cluster, "_under_shared", None)
        return bool(under_shared and under_shared(path))

    def restart_as_new(self, overrides: list[str] | None = None, run_id: str | None = None) -> Job:
        """Launch this job's config again as a new run (`<run_id>-new`, `-new2`, ... unless `run_id` is given),
        from step 0: what to do where `resume()` refuses. The old run's files are never touched.

        >>> job.restart_as_new(["trainer.ckpt_interval=10"])      # doctest: +SKIP
        Job(run_id='quickstart-1-new', submission_id='quickstart-1-new', state='pending')
        """
        from skyrl_core.runs import RunReader, run_dir_of

        config = self.submitted_config()
        if run_id is None:
            root = str((config.get("run") or {}).get("run_root") or "~/skyrl-runs")
            run_id = next(candidate for n in range(1, 1000)
                          if not RunReader(run_dir_of(root, candidate := f"{self.run_id}-new{n if n > 1 else ''}"))
                          .exists())
        return self.cluster.launch(config, overrides=["trainer.resume_mode=none", *(overrides or [])], run_id=run_id,
                                   runtime_env=self.runtime_env, inputs_from=self.run_dir)  # its shipped data too

    def submitted_config(self) -> dict[str, Any]:
        """The config this job was submitted with (Ray keeps it in the job's runtime env), as a dict;
        the run store's config.yaml for a job submitted another way. RuntimeError when neither has one."""
        import yaml

        from skyrl_core.submission import submitted_config

        text = submitted_config(getattr(self._info or self.info(), "runtime_env", None))
        if text is not None:
            return yaml.safe_load(text)
        config = self.run.config()
        if not config:
            raise RuntimeError(f"job {self.submission_id}: Ray's job info holds no config and the run store "
                               f"at {self.run_dir} has no config.yaml")
        return config

    # -- the run store --------------------------------------------------------------------------

    @property
    def run(self) -> Any:
        """The `RunReader` of this job's run directory."""
        if self._reader is None:
            from skyrl_core.runs import RunReader

            self._reader = RunReader(self.run_dir)
        return self._reader

    def export(self, path: str | os.PathLike[str], step: int | None = None, *, register: str | None = None,
               **registration: Any) -> Any:
        """Write checkpoint ``step`` (default: the latest) of this run as a Hugging Face model directory at
        ``path`` (a new local directory or ``s3://bucket/prefix``): `RunReader.export` (the engine in its own process).
        With ``register="<group>"`` the export is then registered in the SageMaker Model Registry and the
        `~skyrl_nb.model_registry.Registration` comes back (its ``.export`` is the export); ``registration`` goes
        to `skyrl_nb.model_registry.register` (``s3=``, ``eval=``, ``region=``, ``image=``, ...).

        >>> job.export("~/models/my-run")       # doctest: +SKIP
        ExportResult(path='/home/me/models/my-run', step=50, run='my-run', files=8, ...)
        >>> job.export("~/models/my-run", register="my-models", s3="s3://my-bucket/registry")  # doctest: +SKIP
        """
        if registration and register is None:
            raise TypeError(f"export: {', '.join(sorted(registration))} only go with register='<group>'")
        from skyrl_nb.model_registry import RegistrationError, check_group
        from skyrl_nb.model_registry import register as register_export

        if register is not None:
            check_group(register)  # a bad name is refused before the export, not after
        result = self.run.export(path, step=step)
        if register is None:
            return result
        try:
            return register_export(result, register, **registration)
        except RegistrationError as err:
            raise RegistrationError(f"{err} (the export at {result.path} is kept)") from None

    def evaluate(self, data: Any = None, *, step: int | None = None, against: Any = "base", **kwargs: Any) -> Any:
        """Evaluate this run's starting model (``base``) against its checkpoint ``step`` (``trained``; default: the
        latest) in one job on this job's cluster, on the run's own val data (or ``data``) with its own eval settings
        and seed, so ``trained``'s pass@1 is the run's eval score at that step; returns the ``EvalResult``
        (`skyrl_nb.eval_jobs.evaluate_run`; ``against`` another model or None, ``kwargs`` as `skyrl_nb.evaluate`).

        >>> job.evaluate(pass_at=[1, 4], n=4, sampling={"temperature": 1.0}).table()     # doctest: +SKIP
        """
        from skyrl_nb.eval_jobs import evaluate_run

        return evaluate_run(self, data, step=step, against=against, **kwargs)

    def dashboard(self, **kwargs: Any) -> Dashboard:
        """A live dashboard that follows this job (see `skyrl_nb.dashboard.Dashboard`)."""
        from skyrl_nb.dashboard import Dashboard

        return Dashboard(self, **kwargs)

    def inspect(self) -> Any:
        """The trajectory inspector for this run (needs `skyrl_widgets.inspector`)."""
        from skyrl_nb.dashboard import open_inspector

        return open_inspector(self.run)

    def playground(self, **kwargs: Any) -> Any:
        """Try one prompt on this run's starting model and its latest checkpoint side by side, each answer with its
        reward, generated on the cluster (`skyrl_nb.playground.playground`; ``cluster``, ``reward``, ``eval_result``,
        ``sampling`` as there)."""
        from skyrl_nb.playground import playground

        return playground(self, **kwargs)

    # -- display ----------------------------------------------------------------------------------

    def _summary(self) -> dict[str, Any]:
        why = None
        try:
            state, why = self.status_detail()
        except Exception as exc:  # unreachable cluster: still show what the run store says
            state = f"unknown ({type(exc).__name__})"
        run_status = self._run_status()
        return {"state": state, "step": run_status.get("step"), "total_steps": run_status.get("total_steps"),
                "error": run_status.get("error") or (why if state in (LOST, RunState.FAILED) else None)}

    def __repr__(self) -> str:
        s = self._summary()
        step = f", step={s['step']}/{s['total_steps']}" if s["step"] is not None else ""
        return f"Job(run_id={self.run_id!r}, submission_id={self.submission_id!r}, state={str(s['state'])!r}{step})"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Live where widgets draw: the dashboard's own header (`skyrl_nb.dashboard.job_display`), updated until
        the job ends, so a job's display and its dashboard never disagree; elsewhere that header as read now."""
        from skyrl_nb.dashboard import job_display

        if getattr(self, "_dashboard_above", False):
            # `%skyrl launch` showed this job's dashboard, header and all, in the same cell: one header a job
            note = f"job {self.run_id}: its dashboard is above"
            return {"text/plain": note, "text/html": f"<span>{html.escape(note)}</span>"}
        return job_display(self, include, exclude)

    def _repr_html_(self) -> str:
        s = self._summary()
        url = f"{self.cluster.dashboard_url.rstrip('/')}/#/jobs/{self.submission_id}"
        rows = [
            ("run", f"<code>{html.escape(self.run_id)}</code>"),
            ("submission", f'<a href="{html.escape(url)}" target="_blank">{html.escape(self.submission_id)}</a>'),
            ("state", html.escape(str(s["state"]))),
            ("step", f"{s['step']} / {s['total_steps']}" if s["step"] is not None else "-"),
            ("run dir", f"<code>{html.escape(self.run_dir)}</code>"),
            ("cluster", html.escape(self.cluster.name)),
        ]
        if s["error"]:
            rows.append(("error", f"<span style='color:#b00'>{html.escape(str(s['error']))}</span>"))
        body = "".join(f"<tr><td style='text-align:left;padding-right:1em'><b>{k}</b></td>"
                       f"<td style='text-align:left'>{v}</td></tr>" for k, v in rows)
        return f"<div><b>Job</b><table>{body}</table></div>"
