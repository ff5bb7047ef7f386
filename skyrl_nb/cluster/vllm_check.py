"""Can a cluster run vLLM engines? Asked by the config form, `Cluster.plan` and `Cluster.launch` before a
`backend: vllm` job goes there.

The answer comes from the cluster's one package probe (`skyrl_nb.cluster.packages`, `skyrl_core.packages`): the engine's own
`find_vllm_python()` (``skyrl_engine.vllm_engine``) run where a job runs, with the engine's code delivered as
a launch would deliver it, asked once per cluster. What it says when there is none is said here in one line
without the internal paths the engine's own message names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyrl_core.packages import vllm_reason
from skyrl_nb.cluster.packages import PROBE_TIMEOUT_S, package_report

if TYPE_CHECKING:
    from skyrl_nb.cluster.base import Cluster

__all__ = ["PROBE_TIMEOUT_S", "vllm_problem"]


def vllm_problem(cluster: Cluster, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a job on ``cluster`` finds vLLM (its own Python, ``$SKYRL_VLLM_PYTHON`` or the env
    ``scripts/make_vllm_env.sh`` builds); else why not, in one phrase (``vLLM is not available on the cluster
    (...)``)."""
    return vllm_reason(package_report(cluster, timeout))
