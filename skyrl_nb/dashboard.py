"""The live training dashboard: follows a job (or shows a finished run) from the run store.

>>> dash = job.dashboard()        # or Dashboard(skyrl_nb.open_run(path))
>>> dash                          # live widget in JupyterLab; a static SVG under papermill/nbconvert
>>> dash.wait()                   # block until the job ends (the widget keeps updating)
>>> dash.on_step_click(lambda step: print(step))

A daemon thread calls `RunReader.poll()` at most twice a second and pushes new points to the
four SVG chart widgets (`skyrl_widgets.charts`), so the kernel stays free. Each chart's whole data
is one synced trait, so a view that renders late still draws every point (plotly's FigureWidget
lost updates sent before its view loaded; see `skyrl_widgets.charts`).

The header (`skyrl_widgets.run_header.RunHeader`) says what the job is doing before step 1 (the engine's
`stage` events: `skyrl_core.choices.Stage`), the elapsed and total time, and carries Stop / Resume / Logs
buttons and a link to the Ray job. `Dashboard(job, charts=False)` is the same header alone: what a `Job`
displays (`job_display`), so a job's display and its dashboard never disagree.

Widget or static? `static=None` (the default) decides with `skyrl_core.frontend.widget_frontend()`:
the widget under JupyterLab / Studio, the static figure (an SVG of a few tens of KB, so an executed
notebook stays small) under papermill, nbconvert, plain IPython and scripts; `SKYRL_NB_STATIC=1|0`
forces either.

One idea, following one run and drawing it; the series and the job actions live in run_series and dashboard_actions.
"""

from __future__ import annotations

import html
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyrl_core.choices import FINAL_STATES, RunState
from skyrl_core.frontend import widget_frontend
from skyrl_nb.dashboard_actions import RESUMABLE_STATES, JobSteering, reader_for
from skyrl_nb.jobs import LOST
from skyrl_nb.run_series import RunSeries, samples_per_step

__all__ = ["Dashboard", "RunSeries", "dashboard", "job_display", "open_inspector", "widget_frontend"]



# ----------------------------------------------------------------------------- series from rows


# ----------------------------------------------------------------------------- the dashboard




class Dashboard(JobSteering):
    """Reward, eval, tokens/s and step-time panels under a header: state, progress, ETA, stage, times, error,
    Stop / Resume / Logs buttons and a link to the Ray job.

    `source` is a `Job` (followed until it ends), a `RunReader` or a run directory. `static` picks the
    rendering (None: `widget_frontend()` decides). `poll_s` is the polling period (at least 0.5 s: at
    most two reads a second). `charts=False` shows the header alone (a `Job`'s display).
    """

    def __init__(self, source: Any, *, static: bool | None = None, poll_s: float = 0.5, charts: bool = True) -> None:
        self.reader, self.job = reader_for(source)
        self.static = (not widget_frontend()) if static is None else static
        self.poll_s = max(0.5, poll_s)
        self.with_charts = charts
        self.series = RunSeries()
        self.state: str = RunState.PENDING
        self.step = 0
        self.total_steps: int | None = None
        self.error: str | None = None
        self.started_at: float | None = None
        """When the job was submitted (Ray's start time), else when the engine started (status.json)."""
        self.ended_at: float | None = None
        self.refreshed_at: float | None = None
        self._callbacks: list[Callable[[int], None]] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._job_checked = 0.0
        self._job_verdict: tuple[str, str | None] | None = None  # (state, error) once Ray says the job ended
        self._display_handle: Any = None
        self._widget: Any = None
        self._charts: dict[str, Any] = {}
        self._header: Any = None
        self._busy = ""
        self._logs_read = 0.0
        self._resume_checked: tuple[tuple[Any, str], str | None] | None = None

    # -- data -------------------------------------------------------------------------------

    @property
    def points(self) -> int:
        """Reward points received so far."""
        return self.series.points

    @property
    def finished(self) -> bool:
        """Whether the run reached a final state (or is `lost` and its job is known to be dead)."""
        return self.state in FINAL_STATES or (self.state == LOST and self._job_verdict is not None)

    def refresh(self) -> int:
        """Read what is new in the run store (and the job's state); returns the new metric rows."""
        with self._lock:
            with self.reader.one_listing():  # one LIST for the reads, however long they take
                rows = self.reader.poll()
                events = self.reader.poll_events()
                status = self.reader.status()
                if rows and self.series.data["samples"] is None:  # once: the reward band's n (0 when unknown)
                    self.series.data["samples"] = samples_per_step(self.reader.config())
            self.series.add_rows(rows)
            self.series.add_events(events)
            self.state = LOST if status.get("lost") else str(status.get("state", RunState.PENDING))
            owned = self.job is None or self._owned(status)
            if self.state in FINAL_STATES and not owned:
                self.state = RunState.PENDING  # a resume: the earlier attempt's end, before this job's start
            self.step = int(status.get("step") or (self.series.data["step"][-1] if self.series.data["step"] else 0))
            self.total_steps = status.get("total_steps") or self.total_steps
            self.error = (status.get("error") if owned else None) or self.error
            if self.state not in FINAL_STATES:
                self._check_job()
                if self._job_verdict is not None:  # the run store has not caught up with Ray: Ray wins
                    self.state, error = self._job_verdict
                    self.error = self.error or error
            self._times(status, owned)
            self.refreshed_at = time.time()
            self._render()
            return len(rows)

    def _times(self, status: dict[str, Any], owned: bool) -> None:
        info = getattr(self.job, "_info", None) if self.job is not None else None
        submitted = getattr(info, "start_time", None)
        self.started_at = (submitted / 1000 if isinstance(submitted, (int, float)) and submitted else
                           status.get("started_at") if owned else None) or self.started_at
        if self.finished:
            ended = getattr(info, "end_time", None)
            self.ended_at = (status.get("ended_at") if owned else None) or (
                ended / 1000 if isinstance(ended, (int, float)) and ended else None) or self.ended_at or time.time()
        else:
            self.ended_at = None

    def _owned(self, status: dict[str, Any]) -> bool:
        try:
            return self.job.owns_status(status)
        except Exception:  # Ray unreachable: believe the run store
            return True

    def _check_job(self) -> None:
        """Ask Ray (every 2 s) whether the job ended without the engine saying so: a crash at import,
        a stop, a kill -9 (`lost`, see `Job.status`). Its verdict then overrides the run store's."""
        if self.job is None or self._job_verdict is not None or time.monotonic() - self._job_checked < 2.0:
            return
        self._job_checked = time.monotonic()
        try:
            state, why = self.job.status_detail()
        except Exception:
            return
        if state == RunState.SUCCEEDED and self.state in (RunState.PENDING, RunState.RUNNING, LOST):
            self._job_verdict = (state, None)
        elif state == LOST:
            self._job_verdict = (state, why)
        elif state == RunState.STOPPED:
            self._job_verdict = (state, None)
        elif state == RunState.FAILED:
            error = why or "the job failed"
            try:
                error = self.job.logs(tail=1).strip() or error
            except Exception:
                pass
            self._job_verdict = (state, error)

    @property
    def warnings(self) -> list[str]:
        """What the run reader skipped (a damaged status.json, metrics line, ...), one line each."""
        return list(self.reader.warnings)

    def eta_s(self) -> float | None:
        """Seconds left at the recent pace, or None when unknown."""
        per = self.series.seconds_per_step()
        if per is None or not self.total_steps:
            return None
        return max(0.0, (self.total_steps - self.step) * per)

    def elapsed_s(self) -> float | None:
        """Seconds since the job was submitted (until it ended, once it has), or None when unknown."""
        if self.started_at is None:
            return None
        return max(0.0, (self.ended_at or time.time()) - self.started_at)

    def stage(self) -> tuple[str, float] | None:
        """``(label, seconds in it)`` while the job has not yet written a step of this attempt: the engine's
        newest `stage` event, or `submitted` while Ray starts the job. None once steps arrive or it ended."""
        from skyrl_core.choices import Stage

        if self.finished:
            return None
        last_row = self.series.times[-1] if self.series.times else None
        begun = self.started_at
        found = self.series.stage
        if found is not None and (last_row is None or found[1] > last_row) and (begun is None or found[1] >= begun - 1):
            name, since = found
        elif self.job is not None and self.state == RunState.PENDING and (begun is None or last_row is None
                                                                          or last_row < begun):
            name, since = Stage.SUBMITTED, begun or time.time()
        else:
            return None
        try:
            label = Stage(name).label
        except ValueError:
            label = str(name).replace("_", " ")
        if found is not None and name == found[0] and self.series.stage_detail:
            label = self.series.stage_detail
        return label, max(0.0, time.time() - since)

    def times_text(self) -> str:
        """``elapsed 1m05s · ETA 2m10s · total ~3m15s`` while running; ``took 3m15s`` once ended."""
        from skyrl_widgets.dashboard import format_seconds

        elapsed = self.elapsed_s()
        if elapsed is None:
            return ""
        if self.finished:
            return f"took {format_seconds(elapsed)}"
        eta = self.eta_s() if self.state == RunState.RUNNING else None
        if eta is None:
            return f"elapsed {format_seconds(elapsed)}"
        return f"elapsed {format_seconds(elapsed)} · ETA {format_seconds(eta)} · total ~{format_seconds(elapsed + eta)}"

    def reward_text(self) -> str:
        """``reward 0.241 -> 0.259 (+0.018; means of the first and last 10 steps of 40)``, or ''."""
        from skyrl_core.runs import reward_change

        change = reward_change(self.series.data["reward_mean"])
        return f"reward {change}" if change.first is not None else ""

    def header(self) -> str:
        """One line: run id, state, step / total, the stage before step 1, reward first -> last
        (``skyrl_core.runs.reward_change``), the policy's parameters, the last error and what was skipped."""
        reward = self.reward_text()
        reward = f", {reward}" if reward else ""
        stage = self.stage()
        now = f" ({stage[0]})" if stage else ""
        err = f", error: {str(self.error).strip().splitlines()[-1][:120]}" if str(self.error or "").strip() else ""
        found = self.reader.warnings
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        skipped = f", skipped: {found[0][:120]}{more}" if found else ""
        from skyrl_widgets.dashboard import parameters_text

        model = f", {parameters_text(self.series.model)}" if self.series.model else ""
        note = self.note()
        note = f" ({note})" if note else ""
        return (f"{self.reader.run_id}: {self.state}{note}, step {self.step}/{self.total_steps or '?'}{now}{reward}"
                f"{model}{err}{skipped}")

    def note(self) -> str:
        """What the header says beside the state: ``restarted 1× (ActorDiedError: ...)`` after automatic restarts
        (``trainer.max_restarts``), ``resumed from step 30 (attempt 1)`` after a resume, or, once the job ended,
        why it cannot be resumed (`Job.resume_problem`)."""
        if self.finished and self.job is not None and self.state in RESUMABLE_STATES:
            problem = self._resume_problem()
            if problem:
                return problem
        restarts = self.series.restarts
        restarted = ""
        if restarts:
            why = list(restarts.values())[-1].strip().splitlines()[-1:] or [""]
            restarted = f"restarted {len(restarts)}× ({why[0][:100]})"
        if self.series.resumed is None:
            return restarted
        step, attempt = self.series.resumed
        resumed = f"resumed from step {step}" + (f" (attempt {attempt})" if attempt else "")
        return f"{restarted}, {resumed}" if restarted else resumed

    # -- following ----------------------------------------------------------------------------

    def start(self) -> Dashboard:
        """Start the background poller (no-op when it runs or the run is finished)."""
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._follow, name=f"skyrl-dashboard-{self.reader.run_id}",
                                            daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following (the figure keeps what it has). To stop the job, `stop_job()`."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _follow(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.refresh()
            except Exception as exc:  # a torn read or a vanished dir must not kill the thread
                self.error = self.error or f"dashboard: {type(exc).__name__}: {exc}"
            if self.finished:
                self.refresh()  # rows written just before the final status
                break
            self._stop.wait(max(0.0, self.poll_s - (time.monotonic() - started)))

    def wait(self, timeout: float | None = None) -> str:
        """Block until the run ends while the dashboard keeps updating; returns the final state.

        In static mode the figure shown earlier is replaced by the final one. In a notebook prefer
        ``await dash.wait_async()``: a blocked kernel answers clicks on the charts only at the end.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        self.start()
        while not self._ended(deadline, timeout):
            time.sleep(self.poll_s)
        self._settle(deadline)
        return self._final()

    async def wait_async(self, timeout: float | None = None) -> str:
        """``state = await dash.wait_async()``: like :meth:`wait`, but the kernel stays free.

        While the cell awaits, the kernel goes on handling widget messages, so a click on a reward
        point opens that step in a linked inspector during the run, not after it.
        """
        import asyncio

        deadline = None if timeout is None else time.monotonic() + timeout
        self.start()
        while not self._ended(deadline, timeout):
            await asyncio.sleep(self.poll_s)
        await asyncio.to_thread(self._settle, deadline)
        return self._final()

    def _ended(self, deadline: float | None, timeout: float | None) -> bool:
        if self.finished:
            return True
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"run {self.reader.run_id} still {self.state} after {timeout} s")
        return False

    def _settle(self, deadline: float | None) -> None:
        """Stop following; let the job's process exit (the engine writes its final status just before)."""
        self.stop()
        if self.job is not None:
            try:
                self.job.wait(timeout=None if deadline is None else max(5.0, deadline - time.monotonic()),
                              poll_s=0.5)
            except Exception:
                pass

    def _final(self) -> str:
        self.refresh()
        if self.static and self._display_handle is not None:
            self._display_handle.update(self._static_bundle(), raw=True)
        return self.state

    # -- steering -----------------------------------------------------------------------------

    # -- clicks -------------------------------------------------------------------------------

    def on_step_click(self, callback: Callable[[int], None]) -> None:
        """Call `callback(step)` when a point of the reward curve is clicked (widget mode)."""
        self._callbacks.append(callback)

    def _step_clicked(self, step: int) -> None:
        for callback in list(self._callbacks):
            callback(step)

    # -- rendering ----------------------------------------------------------------------------

    def widget(self) -> Any:
        """The ipywidgets box (the header and the chart panels), made on first use."""
        if self._widget is None:
            import ipywidgets as w

            from skyrl_widgets.charts import make_charts
            from skyrl_widgets.run_header import RunHeader

            self._header = RunHeader(run_id=self.reader.run_id, compact=not self.with_charts)
            self._header.on_action(self._action)
            parts = [self._header]
            if self.with_charts:
                self._charts = make_charts()
                self._charts["reward"].on_click(self._step_clicked)
                # one column below ~900 px of output, two above: every panel keeps 420 px or more
                parts.append(w.GridBox(list(self._charts.values()), layout=w.Layout(
                    grid_template_columns="repeat(auto-fit, minmax(420px, 1fr))", width="100%")))
            self._widget = w.VBox(parts, layout=w.Layout(width="100%"))
            self._render()
        return self._widget

    def _render(self) -> None:
        if self._widget is None:
            return
        from skyrl_widgets.charts import update_charts
        from skyrl_widgets.dashboard import parameters_text

        stage = self.stage()
        h = self._header
        error = str(self.error or "").strip()
        with h.hold_sync():
            h.run_id = self.reader.run_id
            h.state = str(self.state)
            h.note = self.note()
            h.step = int(self.step)
            h.total_steps = self.total_steps
            h.stage = f"{stage[0]} · {int(stage[1])}s" if stage else ""
            h.times = self.times_text()
            h.reward = self.reward_text() if self.with_charts else ""
            h.parameters = parameters_text(self.series.model) if self.series.model and self.with_charts else ""
            h.error = error.splitlines()[-1][:400] if error else ""
            h.warnings = list(self.reader.warnings)
            h.actions = self._actions()
            h.links = self._links()
            h.details = self._details()
            h.busy = self._busy
            if h.logs_open and self.job is not None and time.monotonic() - self._logs_read > 2.0:
                self._logs_read = time.monotonic()
                try:
                    h.logs = self.job.logs(tail=40)
                except Exception as exc:
                    h.logs = f"(could not read the job's logs: {type(exc).__name__}: {exc})"
        if self._charts:
            update_charts(self._charts, self.series.data, self.total_steps)

    def to_svg(self) -> str:
        """The dashboard as a standalone SVG (what static mode shows)."""
        from skyrl_widgets.dashboard import render_svg

        return render_svg(self.series.data, header=self.header(), total_steps=self.total_steps)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write `to_svg()` to `path` (after reading what is new)."""
        self.refresh()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.to_svg())
        return out

    def _html(self) -> str:
        """The header as HTML (front ends without widgets), saying when it was read."""
        from skyrl_widgets.dashboard import progress_html

        stage = self.stage()
        taken = time.strftime("%H:%M:%S", time.localtime(self.refreshed_at or time.time()))
        body = progress_html(self.state, self.step, self.total_steps, self.eta_s(), self.error, self.reader.warnings,
                             model=self.series.model if self.with_charts else None,
                             stage=f"{stage[0]} {int(stage[1])}s" if stage else "", elapsed=self.times_text())
        rows = "".join(f"<tr><td style='text-align:left;padding-right:1em'><b>{html.escape(k)}</b></td>"
                       f"<td style='text-align:left'><code>{html.escape(v)}</code></td></tr>" for k, v in self._details())
        links = "".join(f" &middot; <a href='{html.escape(x['href'])}' target='_blank' title='{html.escape(x['title'])}'>"
                        f"{html.escape(x['label'])}</a>" + (f" <small>{html.escape(x['hint'])}</small>" if x.get("hint") else "")
                        for x in self._links())
        as_of = "" if self.finished else f" <small>(as of {taken})</small>"
        note = self.note()
        note = f" <i>{html.escape(note)}</i>" if note else ""
        return (f"<div><b>{html.escape(self.reader.run_id)}</b>{note} &middot; {body}{links}{as_of}"
                f"{f'<table>{rows}</table>' if rows else ''}</div>")

    def _static_bundle(self) -> dict[str, Any]:
        # Inline SVG in text/html: every notebook front end shows it, and IPython then skips
        # `_repr_html_` (no second copy in the saved notebook).
        if not self.with_charts:
            return {"text/html": self._html(), "text/plain": self.header()}
        return {"text/html": f"<div>{self.to_svg()}</div>", "text/plain": self.header()}

    def show(self) -> Dashboard:
        """Display the dashboard now (and start following); returns self."""
        from IPython.display import display

        self.refresh()
        if self.static:
            self._display_handle = display(self._static_bundle(), raw=True, display_id=True)
        else:
            display(self.widget())
            self.start()
        return self

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        self.refresh()
        if self.static:
            return self._static_bundle()
        bundle = dict(self.widget()._repr_mimebundle_(include=include, exclude=exclude) or {})
        # Front ends without widgets show the header line instead of the widget.
        bundle["text/html"] = self._html()
        bundle["text/plain"] = self.header()
        self.start()
        return bundle

    def __repr__(self) -> str:
        return f"Dashboard({self.header()})"

    def _repr_html_(self) -> str:
        """The header and an inline SVG (for HTML-only renderers; notebooks use `_repr_mimebundle_`)."""
        self.refresh()
        return f"<div>{self.to_svg()}</div>" if self.with_charts else self._html()


def dashboard(source: Any, **kwargs: Any) -> Dashboard:
    """A `Dashboard` for a job, a run reader or a run directory."""
    return Dashboard(source, **kwargs)


def job_display(job: Any, include: Any = None, exclude: Any = None) -> dict[str, Any]:
    """A `Job`'s display: the dashboard's header alone (`Dashboard(job, charts=False)`), live where a widget
    front end draws it (updated every second until the job ends), else as read now, saying when."""
    return Dashboard(job, charts=False, poll_s=1.0)._repr_mimebundle_(include, exclude)


def open_inspector(run: Any) -> Any:
    """The trajectory inspector for `run` (a RunReader), from `skyrl_widgets.inspector`."""
    try:
        from skyrl_widgets.inspector import TrajectoryInspector
    except ImportError as exc:
        raise RuntimeError("the trajectory inspector (skyrl_widgets.inspector) is not installed") from exc
    return TrajectoryInspector(run)
