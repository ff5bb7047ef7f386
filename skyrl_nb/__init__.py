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
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from skyrl_core.config import ConfigError, JobConfig, load_config
    from skyrl_core.runs import RunReader, list_runs, open_run
    from skyrl_nb import cluster
    from skyrl_nb.cluster.base import Cluster, connect
    from skyrl_nb.dashboard import Dashboard
    from skyrl_nb.eval_jobs import evaluate
    from skyrl_nb.form import configure
    from skyrl_nb.jobs import Job
    from skyrl_nb.serving import serve

# public name -> module it lives in
_LAZY = {
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
    "playground": "skyrl_nb.playground",
    "register": "skyrl_nb.model_registry",
    "serve": "skyrl_nb.serving",
    "evaluate": "skyrl_nb.eval_jobs",
}

#: the public submodules, each imported on first use (`__getattr__` finds any other one too)
_SUBMODULES = ("cluster", "compare", "config", "dashboard", "demo", "form", "jobs", "magics", "playground", "runs",
               "studio")

__all__ = [
    "ConfigError", "Cluster", "Dashboard", "Job", "JobConfig", "RunReader", "__version__", "cluster", "configure",
    "connect", "evaluate", "list_runs", "load_config", "load_ipython_extension", "open_run", "serve",
]


class _CallableModule(types.ModuleType):
    """A submodule named like its main function (`skyrl_nb.compare`): calling it calls that function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    # Importing `skyrl_nb.compare` anywhere sets the package attribute to the module: keep it callable.
    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("compare", "playground") and type(value) is types.ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # Any public submodule (`skyrl_nb.runs`, `skyrl_nb.config`, `skyrl_nb.jobs`, ...) resolves after a
        # bare `import skyrl_nb`, as it did when notebooks of the previous release were written.
        if name.startswith("_") or importlib.util.find_spec(f"skyrl_nb.{name}") is None:
            raise AttributeError(f"module 'skyrl_nb' has no attribute {name!r}")
        return importlib.import_module(f"skyrl_nb.{name}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext skyrl_nb`: register the `%skyrl` magics."""
    from skyrl_nb.magics import load_ipython_extension as load

    load(ipython)
