"""Ray clusters a notebook launches jobs on.

>>> import skyrl_nb
>>> cluster = skyrl_nb.cluster.local()                  # embedded head on this machine
>>> cluster = skyrl_nb.cluster.connect("http://10.0.0.5:8265")
>>> cluster = skyrl_nb.cluster.hyperpod("my-hyperpod")  # KubeRay on SageMaker HyperPod

Everything is imported on first use, so `import skyrl_nb.cluster` stays cheap.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_nb.cluster.addresses import studio_proxy_url
    from skyrl_nb.cluster.base import Cluster, connect
    from skyrl_nb.cluster.local import LocalCluster, local

__all__ = ["Cluster", "LocalCluster", "connect", "hyperpod", "list_hyperpod", "local", "studio_proxy_url"]

_LAZY = {
    "Cluster": "skyrl_nb.cluster.base",
    "connect": "skyrl_nb.cluster.base",
    "studio_proxy_url": "skyrl_nb.cluster.addresses",
    "LocalCluster": "skyrl_nb.cluster.local",
    "local": "skyrl_nb.cluster.local",
    "hyperpod": "skyrl_nb.cluster.hyperpod",
    "list_hyperpod": "skyrl_nb.cluster.hyperpod",
    "HyperPodRayCluster": "skyrl_nb.cluster.hyperpod",
}


# `local` and `hyperpod` name both a submodule and its main function. Importing a submodule sets
# the package attribute to the module, so the module itself is made callable: `cluster.local()`
# calls `cluster.local.local()` however the submodule was first imported.
_CALLABLE_SUBMODULES = ("local", "hyperpod")


class _CallableModule(types.ModuleType):
    """A submodule named like its main function: calling it calls that function."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self, self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Package(types.ModuleType):
    def __setattr__(self, name: str, value: Any) -> None:
        if name in _CALLABLE_SUBMODULES and type(value) is types.ModuleType:
            value.__class__ = _CallableModule
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        # any public submodule (`skyrl_nb.cluster.base`, `.kube`, ...) resolves without its own import
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module 'skyrl_nb.cluster' has no attribute {name!r}")
        return importlib.import_module(f"{__name__}.{name}")
    mod = importlib.import_module(module)
    if name in _CALLABLE_SUBMODULES:
        return getattr(sys.modules[__name__], name)
    value = getattr(mod, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
