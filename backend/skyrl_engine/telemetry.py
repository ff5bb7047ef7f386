"""The training phase and the step metrics as Ray gauges, so Ray's own metrics export carries them.

Every Ray node serves its metrics on its metrics export port (``ray start --metrics-export-port``; 8080 on
skyrl-nb's HyperPod manifests) with Ray's ``ray_`` prefix: what HyperPod observability's Prometheus scrapes.
The driver of a training job sets there, each with the run id as the ``run_id`` tag:

=============================== ============================================================
``ray_skyrl_phase``             1 while a step is in that ``phase`` (tag; ``skyrl_core.choices.Phase``:
                                generate, train, sync, eval, checkpoint), 0 otherwise; ``idle`` is 1 between them
``ray_skyrl_step`` ...          every series of ``skyrl_engine.prometheus`` (the same names and labels with
                                ``ray_`` in front): step, total steps, reward, pass@n, eval score, tokens/s, step
                                time by part, staleness, the driver's memory (CUDA per device in use on GPU)
=============================== ============================================================

Gauges change once per phase change and once per step (a listener of the run store's writer), never per token.
Ray's metrics agent exports them every ``metrics_report_interval_ms`` (10 s by default), and forgets a gauge that
was not set for two of those (Ray 2.60: an unchanged gauge is not sent again), so a thread sets every current
value again each half interval: a phase that lasts minutes stays in the export, and it is gone soon after the
driver ends. The Prometheus port (``run.prometheus_port``, ``skyrl_engine.prometheus``) stays as it is.

Only where there is a Ray cluster: a driver already connected (its roles are Ray actors) sets them at once; one
that is not (every role in its process) but runs inside a cluster (a submitted job: ``RAY_ADDRESS``) joins it in
a background thread, so training never waits for it. A run by hand without a cluster keeps its phase in memory.

vLLM's queue and KV-cache figures are set by the engine actors themselves (:mod:`skyrl_engine.vllm_metrics`,
``ray_skyrl_vllm_*``), where vLLM keeps them.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from skyrl_core.choices import Phase
from skyrl_engine.prometheus import SERIES, memory_series, row_series
from skyrl_engine.ray_runtime import is_submitted_job

PHASE_GAUGE = "skyrl_phase"
#: How long closing waits for a join still under way (a run that ends while Ray is being joined).
JOIN_WAIT_S = 30.0

_gauges: dict[str, Any] = {}  # one set of Ray gauges per process (a metric registers once by name)
F = TypeVar("F", bound=Callable[..., Any])


def in_phase(phase: Phase) -> Callable[[F], F]:
    """A method decorator: the call runs in ``phase`` of ``self.telemetry`` (a :class:`Telemetry`)."""
    def wrap(method: F) -> F:
        @functools.wraps(method)
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            with self.telemetry.phase(phase):
                return method(self, *args, **kwargs)
        return run  # type: ignore[return-value]
    return wrap


class Telemetry:
    """One run's phase and step gauges (see the module docstring). ``state`` says whether they reach Ray:
    ``off`` (no cluster), ``joining``, ``on``, or why not.

    >>> telemetry = Telemetry.start("run-1", total_steps=10)      # doctest: +SKIP
    >>> with telemetry.phase(Phase.GENERATE): ...                  # doctest: +SKIP
    >>> writer.metric_listeners.append(telemetry.observe)          # doctest: +SKIP
    """

    def __init__(self, run_id: str = "", total_steps: int | None = None) -> None:
        self.run_id = run_id
        self.total_steps = total_steps
        self.state = "off"
        self._lock = threading.Lock()
        self._active: Counter[str] = Counter()
        self._last: tuple[int, dict[str, Any]] | None = None
        self._on = False
        self._values: dict[tuple[str, tuple[str, ...]], float] = {}  # what is set now, set again to stay exported
        self._stop = threading.Event()
        self._refresh: threading.Thread | None = None
        self._owns_ray = False
        self._closed = False
        self._joining: threading.Thread | None = None

    @classmethod
    def start(cls, run_id: str, total_steps: int | None = None) -> Telemetry:
        """The gauges of ``run_id``, reaching Ray when there is a cluster (see the module docstring)."""
        telemetry = cls(run_id, total_steps)
        ray = sys.modules.get("ray")
        if ray is not None and ray.is_initialized():
            telemetry._turn_on()
        elif is_submitted_job():
            telemetry.state = "joining"
            # imported here, in the caller's thread: a first `import ray` in the join thread raced the trainer's
            # own (checkpoint.on_every_node on resume), which then got a partially initialized module
            import ray  # noqa: F401

            telemetry._joining = threading.Thread(target=telemetry._join, name="ray-metrics-join", daemon=True)
            telemetry._joining.start()
        return telemetry

    # -- what the trainer calls ------------------------------------------------------------------
    @contextmanager
    def phase(self, phase: Phase) -> Iterator[None]:
        """The block runs in ``phase`` (the async schedules may be in two at once)."""
        self._move(phase, +1)
        try:
            yield
        finally:
            self._move(phase, -1)

    @property
    def phases(self) -> tuple[str, ...]:
        """The phases now: ``('idle',)`` between steps' parts."""
        with self._lock:
            return tuple(p for p in Phase if self._active[p] > 0) or (Phase.IDLE.value,)

    def observe(self, step: int, row: dict[str, Any]) -> None:
        """Set the step gauges from one metrics row (a ``RunWriter.metric_listeners`` callback)."""
        with self._lock:
            self._last = (step, row)
            if self._on:
                self._set_row(step, row)

    def close(self) -> None:
        """Leave Ray if this object joined it (waiting up to ``JOIN_WAIT_S`` for a join under way)."""
        self._closed = True
        self._stop.set()
        for thread in (self._joining, self._refresh):
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=JOIN_WAIT_S)
        if self._owns_ray:
            import ray

            self._owns_ray = False
            ray.shutdown()

    # -- Ray --------------------------------------------------------------------------------------
    def _join(self) -> None:
        try:
            import ray

            # the warning that a thread other than the main one cannot take SIGTERM is this design, not news
            quiet = _DropSigtermWarning()
            logging.getLogger("ray._private.worker").addFilter(quiet)
            try:
                ray.init(address=os.environ.get("RAY_ADDRESS") or "auto", log_to_driver=False,
                         configure_logging=False)
            finally:
                logging.getLogger("ray._private.worker").removeFilter(quiet)
            self._owns_ray = True
            if self._closed:
                return
            self._turn_on()
        except Exception as err:  # noqa: BLE001 - the gauges are a nicety: the run goes on without them
            self.state = f"off: Ray could not be joined ({type(err).__name__}: {err})"
            print(f"[skyrl_engine] warning: ray metrics are {self.state}", flush=True)

    def _turn_on(self) -> None:
        from ray.util.metrics import Gauge

        if not _gauges:
            for name, (doc, labels) in SERIES.items():
                _gauges[name] = Gauge(name, doc, tag_keys=("run_id", *labels))
            _gauges[PHASE_GAUGE] = Gauge(PHASE_GAUGE, "1 while a step is in this phase (generate, train, sync, eval, "
                                                      "checkpoint; idle between them), else 0",
                                         tag_keys=("run_id", "phase"))
        with self._lock:
            self._on = True
            self.state = "on"
            print(f"[skyrl_engine] ray metrics: ray_skyrl_phase, ray_skyrl_step, ... (run_id={self.run_id}) in Ray's "
                  f"metrics export", flush=True)
            if self.total_steps is not None:
                self._set("skyrl_total_steps", (), self.total_steps)
            self._set_phases()
            if self._last is not None:
                self._set_row(*self._last)
        self._refresh = threading.Thread(target=self._keep_exported, name="ray-metrics-refresh", daemon=True)
        self._refresh.start()

    def _keep_exported(self) -> None:
        import ray

        every_s = max(ray._config.metrics_report_interval_ms(), 1000) / 2000.0
        while not self._stop.wait(every_s):
            with self._lock:
                for (name, labels), value in list(self._values.items()):
                    self._set(name, labels, value)

    def _move(self, phase: Phase, by: int) -> None:
        with self._lock:
            before = self._active[phase] > 0
            self._active[phase] += by
            if self._on and before != (self._active[phase] > 0):
                self._set_phases()

    def _set_phases(self) -> None:
        busy = False
        for phase in Phase:
            if phase is not Phase.IDLE:
                on = self._active[phase] > 0
                busy = busy or on
                self._set(PHASE_GAUGE, (phase.value,), 1.0 if on else 0.0)
        self._set(PHASE_GAUGE, (Phase.IDLE.value,), 0.0 if busy else 1.0)

    def _set_row(self, step: int, row: dict[str, Any]) -> None:
        for name, labels, value in [("skyrl_step", (), step), *row_series(row), *memory_series()]:
            self._set(name, labels, value)

    def _set(self, name: str, labels: tuple[str, ...], value: float) -> None:
        self._values[(name, labels)] = value
        keys = ("run_id", *(SERIES[name][1] if name in SERIES else ("phase",)))
        _gauges[name].set(float(value), tags=dict(zip(keys, (self.run_id, *labels), strict=True)))

    def __repr__(self) -> str:
        return f"Telemetry(run_id={self.run_id!r}, state={self.state!r}, phases={self.phases})"

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"


class _DropSigtermWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "SIGTERM handler is not set" not in record.getMessage()
