"""vLLM's queue and KV-cache figures as Ray gauges, set from inside each vLLM engine actor.

An engine (:class:`skyrl_engine.vllm_engine.VLLMEngine`) started with a run id keeps vLLM's statistics on
(``disable_log_stats=False``) and runs one thread that reads vLLM's own in-memory figures (``LLM.get_metrics()``,
the numbers vLLM's Prometheus logger keeps) every :data:`EVERY_S` seconds and sets them as Ray gauges, tagged
with the run id and the engine's index. Ray's metrics export (``ray_`` in front; what HyperPod observability
scrapes) then carries them beside the trainer's ``ray_skyrl_*`` series (:mod:`skyrl_engine.telemetry`):

=================================== ==================================================================
``ray_skyrl_vllm_requests_running``  sequences being decoded now (``vllm:num_requests_running``)
``ray_skyrl_vllm_requests_waiting``  sequences queued for a free slot or KV blocks (``vllm:num_requests_waiting``)
``ray_skyrl_vllm_kv_cache_usage``    the fraction of KV-cache blocks in use, 0-1 (``vllm:kv_cache_usage_perc``)
``ray_skyrl_vllm_preemptions``       sequences preempted for lack of KV blocks since the engine started
``ray_skyrl_vllm_prompt_tokens``     prompt tokens processed since the engine started
``ray_skyrl_vllm_generation_tokens`` tokens generated since the engine started
=================================== ==================================================================

The offline engine steps in the thread that called ``generate``; this thread only reads figures vLLM's logger
has already recorded (the running and waiting counts are those of vLLM's last scheduler step), so a batch is
never slowed by more than a read of a few counters each second. vLLM's own periodic log line is silenced (its
throughput figures are the run's ``timing/*`` metrics already). This module runs in the vLLM python: it imports
nothing from skyrl_core.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

#: Seconds between two reads: Ray forgets a gauge not set for two export intervals (10 s by default).
EVERY_S = 1.0
#: Ray gauge name (``ray_`` is added by Ray's export) -> (vLLM's metric name, description)
GAUGES: dict[str, tuple[str, str]] = {
    "skyrl_vllm_requests_running": ("vllm:num_requests_running", "vLLM sequences being decoded"),
    "skyrl_vllm_requests_waiting": ("vllm:num_requests_waiting", "vLLM sequences waiting for a slot or KV blocks"),
    "skyrl_vllm_kv_cache_usage": ("vllm:kv_cache_usage_perc", "fraction of vLLM's KV-cache blocks in use (0-1)"),
    "skyrl_vllm_preemptions": ("vllm:num_preemptions", "vLLM sequences preempted since the engine started"),
    "skyrl_vllm_prompt_tokens": ("vllm:prompt_tokens", "prompt tokens vLLM processed since the engine started"),
    "skyrl_vllm_generation_tokens": ("vllm:generation_tokens", "tokens vLLM generated since the engine started"),
}
_made: dict[str, Any] = {}  # one Ray gauge per name and process


def wanted(run_id: str | None) -> bool:
    """Whether an engine for ``run_id`` should keep statistics: a run id given and Ray connected (an actor)."""
    ray = sys.modules.get("ray")
    return bool(run_id) and ray is not None and ray.is_initialized()


def read(llm: Any) -> dict[str, float]:
    """The figures of :data:`GAUGES` now, by gauge name (summed over vLLM's own labels); absent ones left out."""
    by_vllm_name = {vllm_name: name for name, (vllm_name, _) in GAUGES.items()}
    out: dict[str, float] = {}
    for metric in llm.get_metrics():
        name = by_vllm_name.get(metric.name)
        value = getattr(metric, "value", None)
        if name is not None and isinstance(value, int | float):
            out[name] = out.get(name, 0.0) + float(value)
    return out


class EngineGauges:
    """The thread that copies one engine's figures into Ray gauges (see the module docstring)."""

    def __init__(self, llm: Any, run_id: str, engine_index: int) -> None:
        from ray.util.metrics import Gauge

        # vLLM's logger prints a throughput line every few seconds when statistics are on
        logging.getLogger("vllm.v1.metrics.loggers").setLevel(logging.WARNING)
        for name, (_, doc) in GAUGES.items():
            if name not in _made:
                _made[name] = Gauge(name, doc, tag_keys=("run_id", "engine"))
        self.llm = llm
        self.tags = {"run_id": run_id, "engine": str(engine_index)}
        self.last: dict[str, float] = {}
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-ray-gauges", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            try:
                self.last = read(self.llm)
                for name, value in self.last.items():
                    _made[name].set(value, tags=self.tags)
            except Exception as err:  # noqa: BLE001 - the gauges are a nicety: generation goes on without them
                self.error = f"{type(err).__name__}: {err}"
                print(f"[skyrl_engine] warning: vLLM gauges stopped ({self.error})", flush=True)
                return
            if self._stop.wait(EVERY_S):
                return

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def __repr__(self) -> str:
        state = f"stopped: {self.error}" if self.error else ("closed" if self._stop.is_set() else "on")
        return f"EngineGauges(run_id={self.tags['run_id']!r}, engine={self.tags['engine']}, {state}, last={self.last})"
