"""Can a cluster run vLLM engines? Asked by the config form before it lets a `backend: vllm` job launch.

A tiny probe job runs the engine's own `find_vllm_python()` (``skyrl_engine.vllm_engine``) on the cluster,
with the engine's code delivered as a launch would deliver it: what it finds is where a job's engines would
run, and what it says when there is none is the reason the job would fail, so the form shows that reason
and keeps Launch off instead of letting the job fail after minutes.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from skyrl_nb.cluster.skyrl_check import run_probe

if TYPE_CHECKING:
    from skyrl_nb.cluster.base import Cluster

PROBE_TIMEOUT_S = 120.0
_MARKER = "skyrl_nb_vllm_probe"
_SCRIPT = f"""
import json, sys
try:
    from skyrl_engine.vllm_engine import find_vllm_python
    found, error = find_vllm_python() or sys.executable, None
except Exception as err:
    found, error = None, f"{{type(err).__name__}}: {{err}}"
print(json.dumps({{"{_MARKER}": 1, "python": found, "error": error}}))
"""


def vllm_problem(cluster: Cluster, timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """None when a job on ``cluster`` finds vLLM (its own Python, ``$SKYRL_VLLM_PYTHON`` or the env
    ``scripts/make_vllm_env.sh`` builds); else one line saying why not, as the engine would."""
    try:
        report, state, last = run_probe(cluster, cluster.engine_code(), f"-c {shlex.quote(_SCRIPT)}", _MARKER, timeout)
    except TimeoutError as err:
        return f"whether vLLM is on the cluster could not be checked: {err}"
    if report is None:
        return (f"whether vLLM is on the cluster could not be checked: the probe job ended {state.lower()} "
                f"without an answer (its last line: {last[:200]})")
    if report.get("error"):
        return f"vLLM is not available on the cluster ({str(report['error'])[:400]})"
    return None
