"""TrajectoryInspector: browse a run's rollouts group by group, live or after the fact.

>>> from skyrl_widgets import TrajectoryInspector          # doctest: +SKIP
>>> insp = TrajectoryInspector("~/skyrl-runs/quickstart")  # a finished run, or a running job's dir
>>> insp                                                   # group view of the newest step
>>> insp.show_step(12)                                     # what the dashboard's click calls
>>> insp.link(dashboard)                                   # clicking a reward point opens that step

The browser side is ``static/inspector.js`` (anywidget, no build step). The kernel side holds only an
index of part files and a few cached steps (``inspector_data.TrajectoryData``); the browser gets one
page of groups at a time.
"""

from __future__ import annotations

import html
import os
import threading
from typing import Any

import anywidget
import traitlets

from skyrl_core.choices import ReadState, RunState
from skyrl_core.frontend import widget_frontend
from skyrl_core.runs import RunReader

from ._static import css, esm
from .inspector_data import DEFAULT_FILTERS, SORTS, TrajectoryData

_LIVE_STATES = (RunState.PENDING, RunState.RUNNING)


def run_reader(run: Any):
    """A ``skyrl_core.runs.RunReader`` for a run given as a path, a reader, or a job-like object."""
    if isinstance(run, RunReader):
        return run
    for attr in ("reader", "run"):
        inner = getattr(run, attr, None)
        if isinstance(inner, RunReader):
            return inner
        if callable(inner):
            try:
                got = inner()
            except TypeError:
                continue
            if isinstance(got, RunReader):
                return got
    run_dir = getattr(run, "run_dir", run)
    if not isinstance(run_dir, (str, os.PathLike)):
        raise TypeError(f"run: expected a run directory, a RunReader or a job, got {type(run).__name__}")
    return RunReader(run_dir)


class TrajectoryInspector(anywidget.AnyWidget):
    """Rollouts of one run: groups side by side, filters, drift of a prompt, token heatmaps.

    ``run`` is a run directory, a ``RunReader`` or a job. ``auto_refresh`` (seconds; ``None`` = on
    while the run is pending or running, ``0`` = off) makes a kernel thread pick up new parts.
    """

    _esm = esm("inspector")
    _css = css("inspector")

    run_id = traitlets.Unicode("").tag(sync=True)
    state = traitlets.Unicode("").tag(sync=True)
    # steps with a part, as [first, last] runs: a 10k-step run is one pair, not 10k numbers
    step_ranges = traitlets.List().tag(sync=True)
    step = traitlets.Int(0).tag(sync=True)
    follow = traitlets.Bool(True).tag(sync=True)
    filters = traitlets.Dict().tag(sync=True)
    sorts = traitlets.List(traitlets.Unicode(), default_value=list(SORTS)).tag(sync=True)
    page = traitlets.Int(0).tag(sync=True)
    page_size = traitlets.Int(8).tag(sync=True)
    heatmap = traitlets.Unicode("off").tag(sync=True)
    has_token_data = traitlets.Bool(False).tag(sync=True)
    view = traitlets.Dict().tag(sync=True)
    drift_view = traitlets.Dict().tag(sync=True)
    error = traitlets.Unicode("").tag(sync=True)
    # what the readers skipped (a damaged status.json, metrics line or Parquet part), one line each
    warnings = traitlets.List(traitlets.Unicode()).tag(sync=True)

    # set before anything in __init__ can fail: ipywidgets' __del__ calls close() on a half-made widget
    _stop: threading.Event | None = None
    _thread: threading.Thread | None = None
    _drift_prompt: str | None = None

    def __init__(self, run: Any, step: int | None = None, *, page_size: int = 8,
                 auto_refresh: float | None = None, static: bool | None = None, **kwargs: Any):
        # as the dashboard: no widget output where no widget front end will draw it (papermill)
        self.static = (not widget_frontend()) if static is None else static
        self.reader = run_reader(run)
        self.data = TrajectoryData(self.reader.run_dir, config=_safe_config(self.reader))
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._drift_prompt: str | None = None
        self._drift_thread: threading.Thread | None = None
        steps = self.data.steps
        start = step if step is not None else (steps[-1] if steps else 0)
        super().__init__(run_id=self.reader.run_id, state=self._state(), step_ranges=_ranges(steps),
                         step=start, follow=step is None, filters=dict(DEFAULT_FILTERS),
                         page_size=page_size, **kwargs)
        self.has_token_data = bool(steps) and self.data.has_token_data(start if start in steps else None)
        self._render()
        self.observe(self._on_query, names=["step", "filters", "page", "page_size"])
        self.on_msg(self._on_message)
        interval = auto_refresh if auto_refresh is not None else (2.0 if self.state in _LIVE_STATES else 0)
        if interval:
            self.start_auto_refresh(interval)

    # ------------------------------------------------------------------ public API
    @property
    def steps(self) -> list[int]:
        """Steps that have a trajectory part, in order."""
        return list(self.data.steps)

    def refresh(self, full: bool = False) -> list[int]:
        """Pick up new (or rewritten) parts and the run state; returns the steps that appeared.

        A few ``stat`` calls normally; the whole folder is listed when ``full``, when the run state
        changes, or when the cheap checks cannot explain a change.
        """
        with self._lock:
            state = self._state()
            result = self.data.refresh(full=full or state != self.state)
            if state != self.state:
                self.state = state
            if not result:
                self._show_warnings()
                return []
            steps = self.data.steps
            if not self.has_token_data and steps:
                self.has_token_data = self.data.has_token_data(steps[-1])
            self.step_ranges = _extend_ranges(self.step_ranges, result.added) if result.only_appended \
                else _ranges(steps)
            if steps and (self.follow or self.step not in steps) and self.step != steps[-1]:
                self.step = steps[-1]  # the observer re-renders
            elif self.step in result.changed or self.step in result.added or self.step in result.removed:
                self._render()
            return result.added

    def show_step(self, step: int) -> None:
        """Open ``step`` (stops following the newest step); the dashboard's click handler."""
        with self._lock:
            if int(step) not in self.data.steps:
                self.refresh()
            self.follow = False
            self.page = 0
            if self.step == int(step):
                self._render()
            else:
                self.step = int(step)

    def set_filters(self, **filters: Any) -> None:
        """Change filters from Python, e.g. ``insp.set_filters(zero_variance="hide", search="42")``."""
        unknown = set(filters) - set(DEFAULT_FILTERS)
        if unknown:
            raise ValueError(f"filters: unknown {sorted(unknown)}; allowed: {', '.join(DEFAULT_FILTERS)}")
        self.page = 0
        self.filters = {**self.filters, **filters}

    def drift(self, prompt: str | None = None, budget_s: float = 0.3) -> dict[str, Any]:
        """Show (and return) how one prompt's completions change across steps.

        ``prompt`` defaults to the first group on screen. Each call scans more of the run within
        ``budget_s``; the view offers "scan more" until every part was read.
        """
        if prompt is None:
            groups = self.view.get("groups") or []
            if not groups:
                raise ValueError("drift: no group on screen; pass the prompt text")
            prompt = groups[0]["prompt"]
        self._drift_prompt = prompt
        result = self.data.drift(prompt, budget_s=budget_s, around_step=self.step)
        self.drift_view = result
        return result

    def _continue_drift(self) -> None:
        """Keep scanning in a kernel thread, updating the drift view, until done or closed."""
        if self._drift_thread is not None and self._drift_thread.is_alive():
            return

        def loop() -> None:
            while self._drift_prompt is not None and not self.drift_view.get("done", True):
                prompt = self._drift_prompt
                result = self.data.drift(prompt, budget_s=0.5, around_step=self.step)
                if prompt == self._drift_prompt:
                    self.drift_view = result

        self._drift_thread = threading.Thread(target=loop, daemon=True, name=f"skyrl-drift-{self.run_id}")
        self._drift_thread.start()

    def link(self, dashboard: Any) -> TrajectoryInspector:
        """Open the clicked step when a point on ``dashboard``'s reward curve is clicked."""
        dashboard.on_step_click(self.show_step)
        return self

    def frame(self, step: int | None = None):
        """The raw rows of ``step`` (default: the step on screen) as a pandas DataFrame."""
        import pandas as pd

        rows = self.data.rows(self.step if step is None else step)
        return pd.DataFrame([{k: v for k, v in r.items() if k != "_i"} for r in rows])

    def start_auto_refresh(self, interval: float = 2.0) -> None:
        """Refresh from a kernel thread every ``interval`` seconds until the run ends or ``close()``."""
        self.stop_auto_refresh()
        self._stop = threading.Event()

        def loop(stop: threading.Event) -> None:
            ticks = 0
            while not stop.wait(interval):
                ticks += 1
                try:
                    self.refresh(full=ticks % 30 == 0)  # now and then, list the folder
                except Exception as exc:  # keep the thread alive; show the reason in the view
                    self.error = f"refresh failed: {exc}"
                if self.state not in _LIVE_STATES:
                    self.refresh(full=True)  # the last parts written before the final status
                    break

        self._thread = threading.Thread(target=loop, args=(self._stop,), daemon=True,
                                        name=f"skyrl-inspector-{self.run_id}")
        self._thread.start()

    def stop_auto_refresh(self) -> None:
        """Stop the refresh thread, if any."""
        if self._stop is not None:
            self._stop.set()

    def close(self) -> None:
        """Stop the kernel threads and close the widget (safe on one whose ``__init__`` failed)."""
        self.stop_auto_refresh()
        self._drift_prompt = None
        super().close()

    # ------------------------------------------------------------------ internals
    def _state(self) -> str:
        status = self.reader.status()
        return ReadState.LOST.value if status.get("lost") else str(status.get("state", RunState.PENDING))

    def _render(self) -> None:
        try:
            self._render_view()
        finally:
            self._show_warnings()

    def _show_warnings(self) -> None:
        found = [*self.reader.warnings, *self.data.warnings]
        if found != self.warnings:
            self.warnings = found

    def _render_view(self) -> None:
        if not self.data.steps or self.step not in self.data.steps:
            self.view = {"step": self.step, "groups": [], "pages": 1, "page": 0, "total_groups": 0,
                         "all_groups": 0, "samples": 0, "discarded": 0, "facets": {}}
            return
        try:
            view = self.data.view(self.step, self.filters, self.page, self.page_size)
        except (KeyError, FileNotFoundError) as exc:  # a part removed by a resume under us
            self.error = str(exc)
            return
        self.error = ""
        self.view = view

    def _on_query(self, change: dict[str, Any]) -> None:
        with self._lock:
            if change["name"] in ("step", "filters") and self.page != 0:
                self.page = 0  # re-enters once for "page"
                return
            self._render()

    def _on_message(self, _widget: Any, content: dict[str, Any], _buffers: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        try:
            if kind == "refresh":
                self.refresh(full=True)  # the user asked: look at everything
            elif kind == "drift":
                self.drift(content.get("prompt") or None)
                self._continue_drift()  # the browser sees the rest arrive
            elif kind == "drift_more" and self._drift_prompt is not None:
                self.drift(self._drift_prompt)
                self._continue_drift()
            elif kind == "drift_close":
                self._drift_prompt = None
                self.drift_view = {}
        except Exception as exc:
            self.error = f"{kind}: {exc}"

    def __repr__(self) -> str:
        steps = self.data.steps
        span = f"{steps[0]}..{steps[-1]}" if steps else "none"
        return (f"TrajectoryInspector({self.run_id!r}, state={self.state}, step={self.step}, "
                f"steps={span} ({len(steps)} parts))")

    def _repr_html_(self) -> str:
        v = self.view or {}
        skipped = "".join(f"<br><small>skipped: {html.escape(w)}</small>" for w in self.warnings)
        return (f"<div><b>Trajectories</b> {html.escape(self.run_id)} &middot; {html.escape(self.state)} "
                f"&middot; step {self.step} &middot; {v.get('total_groups', 0)} groups, "
                f"{v.get('samples', 0)} samples{skipped}</div>")

    def _repr_mimebundle_(self, **kwargs: Any):
        if self.static:
            return {"text/html": self._repr_html_(), "text/plain": repr(self)}, {}
        bundle = super()._repr_mimebundle_(**kwargs)
        if isinstance(bundle, tuple):
            data, meta = bundle
        else:
            data, meta = bundle or {}, {}
        # a static line for front ends without widgets (papermill output, nbconvert)
        data = {**data, "text/html": self._repr_html_()}
        return data, meta


def _ranges(steps: list[int]) -> list[list[int]]:
    """[1, 2, 3, 7, 8] -> [[1, 3], [7, 8]]."""
    return _extend_ranges([], steps)


def _extend_ranges(ranges: list[list[int]], added: list[int]) -> list[list[int]]:
    """``_ranges`` for appended steps without walking the whole run again (a new list, so it syncs)."""
    out = [list(r) for r in ranges[-1:]]
    for s in added:
        if out and s == out[-1][1] + 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return list(ranges[:-1]) + out


def _safe_config(reader: Any) -> dict[str, Any]:
    try:
        return reader.config() or {}
    except Exception:  # a torn or missing config.yaml must not stop the inspector
        return {}
