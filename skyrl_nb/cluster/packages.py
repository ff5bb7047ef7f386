"""Which optional packages a cluster's jobs can import, asked once per cluster, and what that keeps off it.

The questions and the lines are `skyrl_core.packages`' (vLLM, SkyRL, the trackers' packages). One probe job
answers every question at once, with the engine's code delivered as a launch would deliver it, and the
answer is kept on the ``Cluster`` object, so the form, ``Cluster.plan`` and ``Cluster.launch`` ask it at most
once (``cluster._package_report = None`` asks again).

A cluster whose jobs run this very interpreter on this machine (``LocalCluster``: ``runs_here``, its
``python`` is ``sys.executable``, the installed engine) is answered by the same code in a process of this
interpreter, without a job (the kernel itself never imports the engine). The job's environment variables are its
head's, which a local head takes from the kernel that started it.
"""

from __future__ import annotations

import shlex
import sys
from typing import TYPE_CHECKING, Any

from skyrl_core.packages import ANSWER, MARKER, package_lines, packages_needed

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_nb.cluster.base import Cluster

__all__ = ["describe", "package_problems", "package_report"]

PROBE_TIMEOUT_S = 180.0
_SCRIPT = ANSWER + "import json; print(json.dumps(report))\n"


def _answers_here(cluster: Cluster) -> bool:
    """Whether ``cluster``'s jobs run this interpreter with its installed engine, so a process of it can answer."""
    return bool(getattr(cluster, "runs_here", False) and getattr(cluster, "python", None) == sys.executable
                and getattr(cluster, "code", None) == "installed")


def _ask_a_process(timeout: float) -> dict[str, Any]:
    """:data:`skyrl_core.packages.ANSWER` run by this interpreter in a process of its own (what a job of a local
    cluster would run), read back from its last line that carries the marker."""
    import json
    import subprocess

    try:
        done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"the package check did not answer within {timeout:.0f} s"}
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and MARKER in found:
            return found
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return {"error": f"the package check ended with exit {done.returncode} without an answer (its last line: {last[:160]})"}


def package_report(cluster: Cluster, timeout: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """The cluster's answer to every package question (``vllm``, ``skyrl``, ``modules``), asked once and kept on
    ``cluster``. A probe that cannot be run or gives no answer is an answer too (``error``), kept the same way."""
    cached = getattr(cluster, "_package_report", None)
    if cached is not None:
        return cached
    if _answers_here(cluster):
        report = {**_ask_a_process(timeout), "asked": "here"}
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
