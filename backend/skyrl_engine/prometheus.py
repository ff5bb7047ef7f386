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
``skyrl_memory_bytes``          the driver's peak resident memory (``kind="cpu_peak_rss"``), CUDA's peak allocated
                                per device (``kind="gpu_peak_allocated"``, ``device`` label)
=============================== ============================================================

``prometheus_client`` comes with ``ray[default]``; it is imported only when a port is set.
"""

from __future__ import annotations

from typing import Any

from skyrl_core.metric_names import REWARD_KEY, REWARD_STD_KEY, pass_at_n

#: Every metric name the exporter serves (the Grafana JSON's panels may name only these).
METRIC_NAMES = ("skyrl_step", "skyrl_total_steps", "skyrl_reward_mean", "skyrl_reward_std", "skyrl_pass_at_n",
                "skyrl_eval_score", "skyrl_tokens_per_second", "skyrl_step_time_seconds", "skyrl_staleness_steps",
                "skyrl_memory_bytes")


class StepMetricsExporter:
    """Serves one run's step metrics on ``port`` (all interfaces: Prometheus scrapes the pod's address)."""

    def __init__(self, run_id: str, port: int, total_steps: int | None = None, addr: str = "0.0.0.0"):
        from prometheus_client import CollectorRegistry, Gauge, start_http_server

        self.run_id = run_id
        self.registry = CollectorRegistry()

        def gauge(name: str, doc: str, *labels: str) -> Any:
            return Gauge(name, doc, ["run_id", *labels], registry=self.registry)

        self._g = {
            "skyrl_step": gauge("skyrl_step", "The last training step written to the run store"),
            "skyrl_total_steps": gauge("skyrl_total_steps", "Steps the run will train"),
            "skyrl_reward_mean": gauge("skyrl_reward_mean", "reward/avg_raw_reward: mean reward of the step's samples"),
            "skyrl_reward_std": gauge("skyrl_reward_std", "reward/std_raw_reward"),
            "skyrl_pass_at_n": gauge("skyrl_pass_at_n", "reward/avg_pass_at_n", "n"),
            "skyrl_eval_score": gauge("skyrl_eval_score", "eval/all/avg_score on eval steps"),
            "skyrl_tokens_per_second": gauge("skyrl_tokens_per_second", "trainer/tokens_per_second"),
            "skyrl_step_time_seconds": gauge("skyrl_step_time_seconds", "timing/<part> of the last step", "part"),
            "skyrl_staleness_steps": gauge("skyrl_staleness_steps", "async/staleness_<stat>", "stat"),
            "skyrl_memory_bytes": gauge("skyrl_memory_bytes", "The driver's memory", "kind", "device"),
        }
        if total_steps is not None:
            self._g["skyrl_total_steps"].labels(run_id).set(total_steps)
        self.server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        self.port = self.server.server_port

    def observe(self, step: int, row: dict[str, Any]) -> None:
        """Set the gauges from one metrics row (a ``RunWriter.metric_listeners`` callback)."""
        rid, g = self.run_id, self._g
        g["skyrl_step"].labels(rid).set(step)
        simple = {REWARD_KEY: "skyrl_reward_mean", REWARD_STD_KEY: "skyrl_reward_std",
                  "eval/all/avg_score": "skyrl_eval_score", "trainer/tokens_per_second": "skyrl_tokens_per_second"}
        for key, value in row.items():
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if key in simple:
                g[simple[key]].labels(rid).set(value)
            elif key.startswith("timing/"):
                g["skyrl_step_time_seconds"].labels(rid, key[len("timing/"):]).set(value)
            elif key.startswith("async/staleness_"):
                g["skyrl_staleness_steps"].labels(rid, key[len("async/staleness_"):]).set(value)
            elif (n := pass_at_n(key)) is not None:
                g["skyrl_pass_at_n"].labels(rid, str(n)).set(value)
        self._memory()

    def _memory(self) -> None:
        import resource
        import sys

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * (1 if sys.platform == "darwin" else 1024)
        self._g["skyrl_memory_bytes"].labels(self.run_id, "cpu_peak_rss", "").set(rss)
        torch = sys.modules.get("torch")
        if torch is not None and torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                peak = torch.cuda.max_memory_allocated(i)
                self._g["skyrl_memory_bytes"].labels(self.run_id, "gpu_peak_allocated", f"cuda:{i}").set(peak)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __repr__(self) -> str:
        return f"StepMetricsExporter(run_id={self.run_id!r}, port={self.port})"
