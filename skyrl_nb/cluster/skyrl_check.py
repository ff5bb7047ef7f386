"""Is SkyRL's trainer usable on a cluster? Asked before a ``run.engine: skyrl`` job goes there.

A tiny probe job runs ``python -m skyrl_engine.skyrl_bridge --probe`` with the engine's code delivered as a
launch would deliver it; its one JSON line says which SkyRL imports there (or why none does). A missing or
broken SkyRL becomes one `ConfigError` line before anything is submitted, instead of a stack trace from
inside the job. `Cluster.plan` calls this for a SkyRL config; so does ``%skyrl launch --engine skyrl``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from skyrl_nb.cluster.shipping import PROBE_TIMEOUT_S, run_probe

__all__ = ["PROBE_TIMEOUT_S", "check_skyrl", "run_probe", "skyrl_problem"]

if TYPE_CHECKING:
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.cluster.shipping import EngineCode

INSTALL = "pip install 'skyrl[fsdp]=={version}' in the cluster's Python 3.12 (docs/skyrl.md)"


def skyrl_problem(report: dict[str, Any] | None, job_state: str, last_line: str = "") -> str | None:
    """The one line that keeps a SkyRL job off the cluster, or None when ``report`` (the probe's JSON) says
    SkyRL's trainer imports there in the release the translation is written for.

    >>> skyrl_problem({"python": "3.12.3", "skyrl": "0.3.0", "expected": "0.3.0", "error": None}, "SUCCEEDED") is None
    True
    """
    from skyrl_core.skyrl_translate import SKYRL_VERSION

    install = INSTALL.format(version=SKYRL_VERSION)
    if report is None:
        said = f" (its last line: {last_line[:200]})" if last_line else ""
        return (f"run.engine: 'skyrl' could not be checked: the probe job `python -m skyrl_engine.skyrl_bridge "
                f"--probe` ended {job_state.lower()} without an answer{said}; the cluster needs skyrl-nb's engine "
                f"and SkyRL: {install}")
    if report.get("error"):
        return (f"run.engine: 'skyrl' needs SkyRL's trainer on the cluster, and there it does not import "
                f"(Python {report.get('python')}: {report['error']}); {install}")
    if report.get("skyrl") != SKYRL_VERSION:
        return (f"run.engine: 'skyrl' is translated for SkyRL {SKYRL_VERSION}, the cluster has SkyRL "
                f"{report.get('skyrl')}; {install}")
    return None


def check_skyrl(cluster: Cluster, code: EngineCode, timeout: float = PROBE_TIMEOUT_S) -> str:
    """Run the probe job on ``cluster`` (the engine's code delivered by ``code``); return one line saying what
    was found, or raise `ConfigError` with the one line that keeps a SkyRL job off this cluster."""
    from skyrl_core.config import ConfigError

    try:
        report, state, last = run_probe(cluster, code, "-m skyrl_engine.skyrl_bridge --probe", "expected", timeout)
    except TimeoutError as err:
        raise ConfigError([f"run.engine: 'skyrl' could not be checked: {err}"]) from None
    problem = skyrl_problem(report, state, last)
    if problem:
        raise ConfigError([problem])
    return f"SkyRL {report['skyrl']} imports on the cluster (Python {report['python']}; checked by a probe job)"
