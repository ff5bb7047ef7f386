"""The engine's step metrics for Prometheus: ``run.prometheus_port=N`` serves ``http://<driver>:N/metrics``.

Each series carries the run id as the ``run_id`` label; the names below are what the Grafana dashboard in
``docs/grafana/skyrl-nb.json`` draws (its panels are the notebook dashboard's). The exporter listens to the
run store's writer (``RunWriter.metric_listeners``), so every metrics line written is also served:

=============================== ============================================================
``skyrl_step``                  the last step written; ``skyrl_total_steps`` the run's length
``skyrl_reward_mean`` / ``_std`` ``reward/avg_raw_reward``, ``reward/std_raw_reward``
``skyrl_pass_at_n``             ``reward/avg_pass_at_{n}`` (``n`` label)
``skyrl_eval_score``            ``eval/all/avg_score`` on eval steps
``skyrl_tokens_per_second``     ``trainer/tokens_per_second``
``skyrl_step_time_seconds``     ``timing/<part>`` (``part`` label: step, generate, policy_train, ...)
``skyrl_staleness_steps``       ``async/staleness_mean`` / ``_max`` (``stat`` label)
``skyrl_memory_bytes``          the driver's peak resident memory (``kind="cpu_peak_rss"``), CUDA's peak allocated,
                                allocated and reserved per device in use (``kind="gpu_peak_allocated"``,
                                ``gpu_allocated``, ``gpu_reserved``; ``device`` label)
=============================== ============================================================

``prometheus_client`` comes with ``ray[default]``; it is imported only when a port is set. The same series (and
the training phase) also go through Ray's own metrics export: ``skyrl_engine.telemetry``.
"""

from __future__ import annotations

from typing import Any

from skyrl_core.metric_names import EVAL_SCORE_KEY, REWARD_KEY, REWARD_STD_KEY, pass_at_n

#: Every series the exporter serves: name -> (what it is, its labels besides ``run_id``, in order). The Grafana
#: JSON's panels may name only these.
SERIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "skyrl_step": ("The last training step written to the run store", ()),
    "skyrl_total_steps": ("Steps the run will train", ()),
    "skyrl_reward_mean": ("reward/avg_raw_reward: mean reward of the step's samples", ()),
    "skyrl_reward_std": ("reward/std_raw_reward", ()),
    "skyrl_pass_at_n": ("reward/avg_pass_at_n", ("n",)),
    "skyrl_eval_score": ("eval/all/avg_score on eval steps", ()),
    "skyrl_tokens_per_second": ("trainer/tokens_per_second", ()),
    "skyrl_step_time_seconds": ("timing/<part> of the last step", ("part",)),
    "skyrl_staleness_steps": ("async/staleness_<stat>", ("stat",)),
    "skyrl_memory_bytes": ("The driver's memory", ("kind", "device")),
}
METRIC_NAMES = tuple(SERIES)
_SIMPLE = {REWARD_KEY: "skyrl_reward_mean", REWARD_STD_KEY: "skyrl_reward_std", EVAL_SCORE_KEY: "skyrl_eval_score",
           "trainer/tokens_per_second": "skyrl_tokens_per_second"}


def row_series(row: dict[str, Any]) -> list[tuple[str, tuple[str, ...], float]]:
    """``(name, labels, value)`` of every series one metrics row sets (the labels after ``run_id``, as ``SERIES``
    orders them); what this exporter and Ray's gauges (``skyrl_engine.telemetry``) both serve."""
    out: list[tuple[str, tuple[str, ...], float]] = []
    for key, value in row.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key in _SIMPLE:
            out.append((_SIMPLE[key], (), value))
        elif key.startswith("timing/"):
            out.append(("skyrl_step_time_seconds", (key[len("timing/"):],), value))
        elif key.startswith("async/staleness_"):
            out.append(("skyrl_staleness_steps", (key[len("async/staleness_"):],), value))
        elif (n := pass_at_n(key)) is not None:
            out.append(("skyrl_pass_at_n", (str(n),), value))
    return out


def memory_series() -> list[tuple[str, tuple[str, ...], float]]:
    """This process's memory as ``skyrl_memory_bytes`` series: its peak resident memory (``cpu_peak_rss``) and, for
    each CUDA device torch has started here, allocated / reserved / peak allocated bytes. Only devices already in
    use are asked (asking another would start a CUDA context on it); on CPU only ``cpu_peak_rss``."""
    import resource
    import sys

    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    out: list[tuple[str, tuple[str, ...], float]] = [("skyrl_memory_bytes", ("cpu_peak_rss", ""), rss)]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            device = f"cuda:{i}"
            out += [("skyrl_memory_bytes", ("gpu_peak_allocated", device), torch.cuda.max_memory_allocated(i)),
                    ("skyrl_memory_bytes", ("gpu_allocated", device), torch.cuda.memory_allocated(i)),
                    ("skyrl_memory_bytes", ("gpu_reserved", device), torch.cuda.memory_reserved(i))]
    return out


class StepMetricsExporter:
    """Serves one run's step metrics on ``port`` (all interfaces: Prometheus scrapes the pod's address)."""

    def __init__(self, run_id: str, port: int, total_steps: int | None = None, addr: str = "0.0.0.0"):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.run_id = run_id
        self.registry = CollectorRegistry()

        self._g = {name: Gauge(name, doc, ["run_id", *labels], registry=self.registry)
                   for name, (doc, labels) in SERIES.items()}
        if total_steps is not None:
            self._g["skyrl_total_steps"].labels(run_id).set(total_steps)
        self.server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = self.server.server_port

    def observe(self, step: int, row: dict[str, Any]) -> None:
        """Set the gauges from one metrics row (a ``RunWriter.metric_listeners`` callback)."""
        for name, labels, value in [("skyrl_step", (), step), *row_series(row), *memory_series()]:
            self._g[name].labels(self.run_id, *labels).set(value)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __repr__(self) -> str:
        return f"StepMetricsExporter(run_id={self.run_id!r}, port={self.port})"
