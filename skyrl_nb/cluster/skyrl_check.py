"""Is SkyRL's trainer usable on a cluster? Asked before a ``run.engine: skyrl`` job goes there.

A tiny probe job runs ``python -m skyrl_engine.skyrl_bridge --probe`` with the engine's code delivered as a
launch would deliver it; its one JSON line says which SkyRL imports there (or why none does). A missing or
broken SkyRL becomes one `ConfigError` line before anything is submitted, instead of a stack trace from
inside the job. `Cluster.plan` calls this for a SkyRL config; so does ``%skyrl launch --engine skyrl``.
"""

from __future__ import annotations

import json
import shlex
import time
import uuid
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.cluster.shipping import EngineCode

PROBE_TIMEOUT_S = 180.0
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
    from skyrl_nb.cluster.shipping import META_PROBE

    submission_id = f"skyrl-nb-probe-{uuid.uuid4().hex[:12]}"
    entrypoint = f"{shlex.quote(cluster.python)} -m skyrl_engine.skyrl_bridge --probe"
    cluster._submit_with_retry(entrypoint=entrypoint, submission_id=submission_id, runtime_env=code.apply({}),
                               metadata={META_PROBE: "1"})
    deadline = time.monotonic() + timeout
    state = ""
    while time.monotonic() < deadline:
        status = cluster.client.get_job_status(submission_id)
        state = str(getattr(status, "value", status)).upper()
        if state in ("SUCCEEDED", "FAILED", "STOPPED"):
            break
        time.sleep(0.3)
    else:
        raise ConfigError([f"run.engine: 'skyrl' could not be checked: the probe job {submission_id} did not end "
                           f"within {timeout:.0f} s on {cluster.address}"])
    lines = [line for line in (cluster.client.get_job_logs(submission_id) or "").splitlines() if line.strip()]
    report = None
    for line in reversed(lines):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict) and "expected" in found:
            report = found
            break
    problem = skyrl_problem(report, state, lines[-1] if lines else "")
    if problem:
        raise ConfigError([problem])
    return f"SkyRL {report['skyrl']} imports on the cluster (Python {report['python']}; checked by a probe job)"
