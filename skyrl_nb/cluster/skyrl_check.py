"""Is SkyRL's trainer usable on a cluster? Asked before a ``run.engine: skyrl`` job goes there.

The cluster's one package probe (`skyrl_nb.cluster.packages`) runs the engine's ``skyrl_bridge.probe()`` where
a job runs, with the engine's code delivered as a launch would deliver it; it says which SkyRL imports there
(or why none does). A missing or
broken SkyRL becomes one `ConfigError` line before anything is submitted, instead of a stack trace from
inside the job. `Cluster.plan` calls this for a SkyRL config; so does ``%skyrl launch --engine skyrl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from skyrl_core.packages import SKYRL_INSTALL, skyrl_problem
from skyrl_nb.cluster.shipping import PROBE_TIMEOUT_S, run_probe

__all__ = ["PROBE_TIMEOUT_S", "check_skyrl", "run_probe", "skyrl_problem"]

if TYPE_CHECKING:
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.cluster.shipping import EngineCode

INSTALL = SKYRL_INSTALL


def check_skyrl(cluster: Cluster, code: EngineCode | None = None, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Whether SkyRL's trainer imports on ``cluster``, from its one package probe (`skyrl_nb.cluster.packages`,
    asked once per cluster; ``code`` is accepted for callers that name it, the probe delivers the engine as the
    cluster's default does): one line saying what was found, or `ConfigError` with the one line that keeps a
    SkyRL job off this cluster."""
    from skyrl_core.config import ConfigError
    from skyrl_core.packages import clean_line, skyrl_line
    from skyrl_nb.cluster.packages import package_report

    report = package_report(cluster, timeout)
    problem = skyrl_line(report)
    if problem:
        raise ConfigError([clean_line(problem)])
    how = "here: this interpreter runs its jobs" if report.get("asked") == "here" else "by a probe job"
    return f"SkyRL {report['skyrl']['skyrl']} imports on the cluster (Python {report['skyrl']['python']}; checked {how})"
