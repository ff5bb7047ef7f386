"""Which Ray and Python a cluster runs, and whether a job from this notebook can run there: checked before
anything is submitted, refused in one line naming both sides and what to install.

The cluster says its versions through the dashboard: ``/api/version`` (``ray_version``) and
``/api/v0/cluster_metadata`` (``data.rayVersion``, ``data.pythonVersion``: the head's, as Ray recorded them
when it started). The rule, by how the engine's code reaches the job (`skyrl_nb.cluster.shipping.EngineCode`):

- ``ship`` (the default for a cluster elsewhere): this notebook's installed engine runs in the cluster's Ray and
  Python, so both must match this notebook's to the minor version (Ray 2.60.x with 2.60.y, Python 3.11.x with
  3.11.y): the engine uses Ray's actor and placement-group APIs as they are in the Ray it was installed with,
  and the shipped packages were resolved for this Python.
- ``installed`` / ``image``: the engine is the cluster's own, built with the cluster's Ray and Python; nothing
  here is compared. (Ray's job client speaks the Jobs REST API across versions.)

skyrl-nb never joins a cluster as a Ray client (no ``ray.init`` in the kernel), so the exact-to-the-patch match
that ``ray.init()`` from an attached Studio Space needs is not required for its jobs; :func:`client_mismatch`
says whether the kernel's own ``ray.init()`` would meet it (`connect()` warns for an attached Space).

>>> version_problems(Versions("2.52.1", "3.12.4"), "ship", Versions("2.60.0", "3.11.7"))[0][:68]
'ray/python: the cluster runs Ray 2.52.1 on Python 3.12.4, but this no'
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Any

from skyrl_core.errors import ConfigError

if TYPE_CHECKING:
    from skyrl_nb.cluster.shipping import EngineCode


class VersionMismatch(ConfigError):
    """The cluster's Ray or Python cannot run a job from this notebook; one line naming both and what to install."""


@dataclass(frozen=True)
class Versions:
    """A Ray and a Python version (``python`` None: the cluster did not say)."""

    ray: str
    python: str | None = None

    def __repr__(self) -> str:
        return f"Versions(ray={self.ray}, python={self.python or '?'})"

    def _repr_html_(self) -> str:
        return f"<code>{escape(repr(self))}</code>"


def minor(version: str) -> str:
    """``"2.60.0"`` -> ``"2.60"``."""
    return ".".join(version.split(".")[:2])


def here() -> Versions:
    """This kernel's Ray (installed package, not imported) and Python."""
    import importlib.metadata

    try:
        ray = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        ray = "none"
    return Versions(ray, platform.python_version())


def cluster_versions(cluster: Any, timeout: float = 5.0) -> Versions | None:
    """The Ray and Python ``cluster``'s head runs, from its dashboard; None when the dashboard cannot be read
    (then nothing is refused: the submission itself will say what is wrong)."""
    try:
        ray = str(cluster._get("/api/version", timeout=timeout)["ray_version"])
    except Exception:  # noqa: BLE001 - an unreadable dashboard refuses nothing by itself
        return None
    try:
        meta = (cluster._get("/api/v0/cluster_metadata", timeout=timeout) or {}).get("data") or {}
    except Exception:  # noqa: BLE001 - older Ray, or a proxy that does not pass it: Ray alone is compared
        meta = {}
    return Versions(str(meta.get("rayVersion") or ray), meta.get("pythonVersion"))


def version_problems(there: Versions | None, code: EngineCode | str, notebook: Versions | None = None) -> list[str]:
    """Why a job whose engine comes by ``code`` (``ship``/``installed``/``image``) cannot run on a cluster that
    runs ``there``, one line ([] when it can, or when ``there`` is unknown). ``notebook``: this kernel's."""
    mode = code if isinstance(code, str) else code.mode
    if there is None or mode != "ship":
        return []
    notebook = notebook or here()
    ray_ok = minor(there.ray) == minor(notebook.ray)
    python_ok = there.python is None or notebook.python is None or minor(there.python) == minor(notebook.python)
    if ray_ok and python_ok:
        return []
    py_tag = minor(notebook.python or "3.11").replace(".", "")
    return [f"ray/python: the cluster runs Ray {there.ray} on Python {there.python or '?'}, but this notebook ships "
            f"the engine for Ray {notebook.ray} on Python {notebook.python} (shipped code needs both to match to the "
            f"minor version); install ray[default]=={there.ray} here in a Python {minor(there.python or '?')} "
            f"environment, run the cluster on rayproject/ray:{notebook.ray}-py{py_tag}, or launch with "
            "code='installed' where the cluster has skyrl-nb"]


def check_versions(cluster: Any, code: EngineCode | str) -> Versions | None:
    """Ask ``cluster`` its versions and raise :class:`VersionMismatch` (one line) when a job whose engine comes by
    ``code`` cannot run there; returns what the cluster said (None: it could not be read)."""
    there = cluster_versions(cluster)
    problems = version_problems(there, code)
    if problems:
        raise VersionMismatch(problems)
    return there


def client_mismatch(there: Versions | None, notebook: Versions | None = None) -> str | None:
    """Why ``ray.init()`` from this kernel to a cluster running ``there`` would fail (Ray's client needs the same
    Ray and Python down to the patch), in one line; None when they match or ``there`` is unknown."""
    notebook = notebook or here()
    if there is None or (there.ray == notebook.ray and there.python in (None, notebook.python)):
        return None
    return (f"the attached cluster runs Ray {there.ray} on Python {there.python or '?'}, this kernel Ray {notebook.ray} "
            f"on Python {notebook.python}: ray.init() from here needs both to match exactly (skyrl-nb's jobs go "
            "through the Jobs API and only need the minor versions to match)")


def warn_client_mismatch(cluster: Any) -> str | None:
    """Warn (``UserWarning``, one line) when ``ray.init()`` from this kernel to ``cluster`` would fail on versions;
    returns the line, or None when they match or cannot be read."""
    import warnings

    line = client_mismatch(cluster_versions(cluster))
    if line:
        warnings.warn(line, stacklevel=3)
    return line
