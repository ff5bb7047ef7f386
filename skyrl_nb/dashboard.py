"""The live training dashboard: follows a job (or shows a finished run) from the run store.

>>> dash = job.dashboard()        # or Dashboard(skyrl_nb.open_run(path))
>>> dash                          # live widget in JupyterLab; a static SVG under papermill/nbconvert
>>> dash.wait()                   # block until the job ends (the widget keeps updating)
>>> dash.on_step_click(lambda step: print(step))

A daemon thread calls `RunReader.poll()` at most twice a second and pushes new points to the
four SVG chart widgets (`skyrl_widgets.charts`), so the kernel stays free. Each chart's whole data
is one synced trait, so a view that renders late still draws every point (plotly's FigureWidget
lost updates sent before its view loaded; see `skyrl_widgets.charts`).

Widget or static? `static=None` (the default) decides with `skyrl_core.frontend.widget_frontend()`:
the widget under JupyterLab / Studio, the static figure (an SVG of a few tens of KB, so an executed
notebook stays small) under papermill, nbconvert, plain IPython and scripts; `SKYRL_NB_STATIC=1|0`
forces either.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyrl_core.choices import FINAL_STATES, RunState
from skyrl_core.frontend import widget_frontend
from skyrl_nb.jobs import LOST

__all__ = ["Dashboard", "RunSeries", "dashboard", "open_inspector", "widget_frontend"]

_PASS_RE = re.compile(r"^reward/avg_pass_at_(\d+)$")


# ----------------------------------------------------------------------------- series from rows


class RunSeries:
    """Metric rows -> the curves the views draw (`skyrl_widgets.dashboard.empty_series` layout)."""

    def __init__(self) -> None:
        from skyrl_widgets.dashboard import empty_series

        self.data = empty_series()
        self.times: list[float] = []
        self.model: dict[str, Any] = {}
        """The policy's ``{"total", "trainable", "lora_rank"}`` parameter counts, once the run has started."""

    def add_rows(self, rows: list[dict[str, Any]]) -> int:
        """Append metric rows (a resumed run may repeat steps: later rows replace earlier ones)."""
        d = self.data
        for row in rows:
            step = row.get("step")
            if step is None:
                continue
            if d["step"] and step <= d["step"][-1]:
                self._truncate(step)
            d["step"].append(step)
            self.times.append(row.get("time") or time.time())
            d["reward_mean"].append(row.get("reward/avg_raw_reward"))
            d["reward_std"].append(row.get("reward/std_raw_reward"))
            pass_value = None
            for key, value in row.items():
                m = _PASS_RE.match(key)
                if m:
                    d["pass_n"] = int(m.group(1))
                    pass_value = value
            d["pass_at"].append(pass_value)
            d["tokens_per_s"].append(row.get("trainer/tokens_per_second"))
            for name in d["timing"]:
                d["timing"][name].append(row.get(f"timing/{name}"))
            score = row.get("eval/all/avg_score")
            if score is not None:
                self._add_eval(step, score)
        return len(rows)

    def add_events(self, events: list[dict[str, Any]]) -> None:
        """Eval scores reported as events (step 0 for `eval_before_train`), and the policy's parameter counts
        from the `started` event (`model`)."""
        for ev in events:
            if ev.get("kind") == "started" and isinstance(ev.get("policy_parameters"), dict):
                self.model = dict(ev["policy_parameters"])
            if ev.get("kind") != "eval":
                continue
            score = ev.get("eval/all/avg_score", ev.get("avg_score", ev.get("score")))
            if score is not None:
                self._add_eval(int(ev.get("step") or 0), score)

    def _add_eval(self, step: int, score: float) -> None:
        d = self.data
        if step in d["eval_step"]:
            d["eval_score"][d["eval_step"].index(step)] = score
            return
        d["eval_step"].append(step)
        d["eval_score"].append(score)
        pairs = sorted(zip(d["eval_step"], d["eval_score"], strict=True))
        d["eval_step"], d["eval_score"] = [p[0] for p in pairs], [p[1] for p in pairs]

    def _truncate(self, step: int) -> None:
        d = self.data
        keep = sum(1 for s in d["step"] if s < step)
        for key in ("step", "reward_mean", "reward_std", "pass_at", "tokens_per_s"):
            del d[key][keep:]
        for col in d["timing"].values():
            del col[keep:]
        del self.times[keep:]

    @property
    def points(self) -> int:
        """How many reward points there are."""
        return sum(1 for v in self.data["reward_mean"] if v is not None)

    def seconds_per_step(self) -> float | None:
        """Mean wall time of the last (up to) 10 steps."""
        t = self.times[-11:]
        if len(t) < 2:
            return None
        return (t[-1] - t[0]) / (len(t) - 1)


# ----------------------------------------------------------------------------- the dashboard


def _reader_for(source: Any) -> tuple[Any, Any]:
    """(RunReader, Job or None) for a Job, a RunReader, or a run directory path."""
    from skyrl_core.runs import RunReader

    if hasattr(source, "submission_id") and hasattr(source, "run_dir"):
        return RunReader(source.run_dir), source
    if isinstance(source, RunReader):
        return RunReader(source.run_dir), None
    return RunReader(os.fspath(source)), None


class Dashboard:
    """Reward, eval, tokens/s and step-time panels, a progress bar with ETA, state and last error.

    `source` is a `Job` (followed until it ends), a `RunReader` or a run directory. `static`
    picks the rendering (None: `widget_frontend()` decides). `poll_s` is the polling period
    (at least 0.5 s: at most two reads a second).
    """

    def __init__(self, source: Any, *, static: bool | None = None, poll_s: float = 0.5) -> None:
        self.reader, self.job = _reader_for(source)
        self.static = (not widget_frontend()) if static is None else static
        self.poll_s = max(0.5, poll_s)
        self.series = RunSeries()
        self.state: str = RunState.PENDING
        self.step = 0
        self.total_steps: int | None = None
        self.error: str | None = None
        self._callbacks: list[Callable[[int], None]] = []
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._job_checked = 0.0
        self._job_verdict: tuple[str, str | None] | None = None  # (state, error) once Ray says the job ended
        self._display_handle: Any = None
        self._widget: Any = None
        self._charts: dict[str, Any] = {}
        self._progress: Any = None
        self._header: Any = None

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
            rows = self.reader.poll()
            self.series.add_rows(rows)
            self.series.add_events(self.reader.poll_events())
            status = self.reader.status()
            self.state = LOST if status.get("lost") else str(status.get("state", RunState.PENDING))
            if self.state in FINAL_STATES and self.job is not None and not self._owned(status):
                self.state = RunState.PENDING  # a resume: the earlier attempt's end, before this job's start
            self.step = int(status.get("step") or (self.series.data["step"][-1] if self.series.data["step"] else 0))
            self.total_steps = status.get("total_steps") or self.total_steps
            self.error = status.get("error") or self.error
            if self.state not in FINAL_STATES:
                self._check_job()
                if self._job_verdict is not None:  # the run store has not caught up with Ray: Ray wins
                    self.state, error = self._job_verdict
                    self.error = self.error or error
            self._render()
            return len(rows)

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

    def header(self) -> str:
        """One line: run id, state, step / total, reward first -> last (``skyrl_core.runs.reward_change``)."""
        from skyrl_core.runs import reward_change

        change = reward_change(self.series.data["reward_mean"])
        reward = f", reward {change}" if change.first is not None else ""
        err = f", error: {str(self.error).strip().splitlines()[-1][:120]}" if str(self.error or "").strip() else ""
        found = self.reader.warnings
        more = f" (+{len(found) - 1} more)" if len(found) > 1 else ""
        skipped = f", skipped: {found[0][:120]}{more}" if found else ""
        from skyrl_widgets.dashboard import parameters_text

        model = f", {parameters_text(self.series.model)}" if self.series.model else ""
        return (f"{self.reader.run_id}: {self.state}, step {self.step}/{self.total_steps or '?'}{reward}{model}"
                f"{err}{skipped}")

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
        """Stop following (the figure keeps what it has)."""
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

    # -- clicks -------------------------------------------------------------------------------

    def on_step_click(self, callback: Callable[[int], None]) -> None:
        """Call `callback(step)` when a point of the reward curve is clicked (widget mode)."""
        self._callbacks.append(callback)

    def _step_clicked(self, step: int) -> None:
        for callback in list(self._callbacks):
            callback(step)

    # -- rendering ----------------------------------------------------------------------------

    def widget(self) -> Any:
        """The ipywidgets box (header, progress bar, four chart panels), made on first use."""
        if self._widget is None:
            import ipywidgets as w

            from skyrl_widgets.charts import make_charts

            self._header = w.HTML()
            self._progress = w.IntProgress(min=0, max=1, value=0, layout=w.Layout(width="40%"))
            self._charts = make_charts()
            self._charts["reward"].on_click(self._step_clicked)
            grid = w.GridBox(list(self._charts.values()),
                             layout=w.Layout(grid_template_columns="repeat(2, minmax(300px, 1fr))", width="100%"))
            self._widget = w.VBox([w.HBox([self._progress, self._header]), grid])
            self._render()
        return self._widget

    def _render(self) -> None:
        if self._widget is None:
            return
        from skyrl_widgets.charts import update_charts
        from skyrl_widgets.dashboard import progress_html

        self._header.value = progress_html(self.state, self.step, self.total_steps, self.eta_s(), self.error,
                                           self.reader.warnings, model=self.series.model)
        self._progress.max = max(1, self.total_steps or self.step or 1)
        self._progress.value = min(self.step, self._progress.max)
        self._progress.bar_style = {"succeeded": "success", "failed": "danger"}.get(self.state, "info")
        update_charts(self._charts, self.series.data)

    def to_svg(self) -> str:
        """The dashboard as a standalone SVG (what static mode shows)."""
        from skyrl_widgets.dashboard import render_svg

        return render_svg(self.series.data, header=self.header())

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write `to_svg()` to `path` (after reading what is new)."""
        self.refresh()
        out = Path(path)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(self.to_svg())
        return out

    def _static_bundle(self) -> dict[str, Any]:
        # Inline SVG in text/html: every notebook front end shows it, and IPython then skips
        # `_repr_html_` (no second copy in the saved notebook).
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
        from skyrl_widgets.dashboard import progress_html

        # Front ends without widgets show the header line instead of the widget.
        bundle["text/html"] = progress_html(self.state, self.step, self.total_steps, self.eta_s(), self.error,
                                            self.reader.warnings, model=self.series.model)
        self.start()
        return bundle

    def __repr__(self) -> str:
        return f"Dashboard({self.header()})"

    def _repr_html_(self) -> str:
        """The header and an inline SVG (for HTML-only renderers; notebooks use `_repr_mimebundle_`)."""
        self.refresh()
        return f"<div>{self.to_svg()}</div>"


def dashboard(source: Any, **kwargs: Any) -> Dashboard:
    """A `Dashboard` for a job, a run reader or a run directory."""
    return Dashboard(source, **kwargs)


def open_inspector(run: Any) -> Any:
    """The trajectory inspector for `run` (a RunReader), from `skyrl_widgets.inspector`."""
    try:
        from skyrl_widgets.inspector import TrajectoryInspector
    except ImportError as exc:
        raise RuntimeError("the trajectory inspector (skyrl_widgets.inspector) is not installed") from exc
    return TrajectoryInspector(run)
