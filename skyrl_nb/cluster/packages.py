"""Which optional packages a cluster's jobs can import, asked once per cluster, and what that keeps off it.

The questions and the lines are `skyrl_core.packages`' (vLLM, SkyRL, the trackers' packages). One probe job
answers every question at once, with the engine's code delivered as a launch would deliver it, and the
answer is kept on the ``Cluster`` object, so the form, ``Cluster.plan`` and ``Cluster.launch`` ask it at most
once (``cluster._package_report = None`` asks again).

A cluster whose jobs run this very interpreter on this machine (``LocalCluster``: ``runs_here``, its
``python`` is ``sys.executable``, the installed engine) is answered here by the same code, without a job,
unless SkyRL is installed (importing its trainer to check it belongs in a job, not in the kernel). The job's
environment variables are its head's, which a local head takes from the kernel that started it.
"""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Any

from skyrl_core.packages import ANSWER, MARKER, answer_here, package_lines, packages_needed

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_nb.cluster.base import Cluster

__all__ = ["describe", "package_problems", "package_report"]

PROBE_TIMEOUT_S = 180.0
_SCRIPT = ANSWER + "import json; print(json.dumps(report))\n"


def _answers_here(cluster: Cluster) -> bool:
    """Whether ``cluster``'s jobs run this interpreter with its installed engine, so this process can answer."""
    import importlib.metadata

    if not (getattr(cluster, "runs_here", False) and getattr(cluster, "python", None) == sys.executable
            and getattr(cluster, "code", None) == "installed"):
        return False
    try:
        importlib.metadata.version("skyrl")
    except importlib.metadata.PackageNotFoundError:
        return True
    return False  # SkyRL is installed: checking that its trainer imports is a job's work, not the kernel's


def package_report(cluster: Cluster, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The cluster's answer to every package question (``vllm``, ``skyrl``, ``modules``), asked once and kept on
    ``cluster``. A probe that cannot be run or gives no answer is an answer too (``error``), kept the same way."""
    cached = getattr(cluster, "_package_report", None)
    if cached is not None:
        return cached
    if _answers_here(cluster):
        report = {**answer_here(), "asked": "here"}
    else:
        report = {**_ask_with_a_job(cluster, timeout), "asked": "job"}
    cluster._package_report = report
    return report


def _ask_with_a_job(cluster: Cluster, timeout: float) -> dict[str, Any]:
    from skyrl_nb.cluster.shipping import run_probe

    try:
        found, state, last = run_probe(cluster, cluster.engine_code(), f"-c {shlex.quote(_SCRIPT)}", MARKER, timeout)
    except TimeoutError as err:
        return {"error": str(err)}
    except Exception as err:  # noqa: BLE001 - the probe could not even be submitted: say so, refuse
        return {"error": f"the probe job could not be submitted ({type(err).__name__})"}
    if found is None:
        return {"error": f"the probe job ended {state.lower()} without an answer (its last line: {last[:160]})"}
    return found


def package_problems(cfg: JobConfig, cluster: Cluster, has_gpu: bool | None = None) -> list[str]:
    """Every package ``cfg`` needs that ``cluster``'s jobs cannot import, one line each ([] when all are there,
    and no probe at all when ``cfg`` needs none): `skyrl_core.packages.package_lines` of the cluster's answer."""
    if not packages_needed(cfg):
        return []
    return package_lines(cfg, package_report(cluster), has_gpu)


def describe(report: dict[str, Any]) -> str:
    """One line for a plan: what the probe found."""
    if "error" in report:
        return f"not known ({report['error']})"
    have = [name for name, ok in (report.get("modules") or {}).items() if ok]
    skyrl = (report.get("skyrl") or {}).get("skyrl")
    return (f"vLLM {'yes' if report.get('vllm') is None else 'no'}, SkyRL {skyrl or 'no'}, "
            f"trackers' packages: {', '.join(have) or 'none'} (Python {report.get('python')})")
