"""skyrl-nb: RL post-training of language models from a notebook, on Ray.

>>> import skyrl_nb
>>> cluster = skyrl_nb.cluster.local()                 # embedded Ray head, token auth on
>>> job = cluster.launch("quickstart", overrides=["trainer.max_training_steps=50"])
>>> job.dashboard()                                    # live reward / eval / throughput
>>> skyrl_nb.list_runs("~/skyrl-runs")

In a notebook: `%load_ext skyrl_nb`, then `%skyrl launch ...` (see `skyrl_nb.magics`).

Everything below is imported on first use: `import skyrl_nb` loads no torch, ray, plotly, pandas,
pyarrow or boto3.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from skyrl_core.config import ConfigError, JobConfig, load_config
    from skyrl_core.runs import RunReader, list_runs, open_run
    from skyrl_nb import cluster
    from skyrl_nb.cluster.base import Cluster, connect
    from skyrl_nb.dashboard import Dashboard
    from skyrl_nb.form import configure
    from skyrl_nb.jobs import Job

# public name -> module it lives in
_LAZY = {
    "cluster": None,
    "Cluster": "skyrl_nb.cluster.base",
    "connect": "skyrl_nb.cluster.base",
    "JobConfig": "skyrl_core.config",
    "ConfigError": "skyrl_core.config",
    "load_config": "skyrl_core.config",
    "Job": "skyrl_nb.jobs",
    "RunReader": "skyrl_core.runs",
    "open_run": "skyrl_core.runs",
    "list_runs": "skyrl_core.runs",
    "Dashboard": "skyrl_nb.dashboard",
    "configure": "skyrl_nb.form",
    "compare": "skyrl_nb.compare",
}

__all__ = [
    "ConfigError", "Cluster", "Dashboard", "Job", "JobConfig", "RunReader", "__version__", "cluster", "configure",
    "connect", "list_runs", "load_config", "load_ipython_extension", "open_run",
]


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'skyrl_nb' has no attribute {name!r}")
    module = _LAZY[name]
    if module is None:  # a subpackage
        return importlib.import_module(f"skyrl_nb.{name}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext skyrl_nb`: register the `%skyrl` magics."""
    from skyrl_nb.magics import load_ipython_extension as load

    load(ipython)
