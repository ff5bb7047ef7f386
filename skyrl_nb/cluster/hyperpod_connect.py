"""The notebook's `Cluster` on a KubeRay head on HyperPod, reached one of two ways: a port-forward through the
Kubernetes API server (`HyperPodRayCluster.connect`, the default) or the HyperPod Ray Endpoint Operator's
authenticated endpoint (``dashboard="endpoint"``), which AWS's ``toolkit-for-ray-on-sagemaker-ai`` reaches as
``sagemaker_ray://<RayCluster>/<namespace>``.

The toolkit finds the Kubernetes API through a kubeconfig (``$KUBECONFIG``). :func:`write_kubeconfig` writes one
for the HyperPod cluster's EKS cluster, whose user runs ``python -m skyrl_nb.cluster.kube token`` (this
interpreter signs the EKS token: no AWS CLI, no token on disk), and the endpoint cluster points ``KUBECONFIG``
at it only while Ray's job client is made.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_nb.cluster.kuberay import ENGINE_METRICS_PORT

if TYPE_CHECKING:
    from skyrl_nb.cluster.kube import KubeClient

_ENV_LOCK = threading.Lock()


def endpoint_address(name: str, namespace: str) -> str:
    """The ``sagemaker_ray://`` address of RayCluster ``name`` in ``namespace``."""
    return f"sagemaker_ray://{name}/{namespace}"


def write_kubeconfig(kube: KubeClient, path: str | os.PathLike[str], *, region: str | None = None) -> Path:
    """Write a kubeconfig for ``kube``'s API server at ``path`` (mode 0600) and return the path.

    With an EKS token source the user is an ``exec`` plugin (``python -m skyrl_nb.cluster.kube token <eks>
    <region>``), so the file holds no secret; any other token (a fixed string, a callable) is written as it is
    now."""
    import yaml

    from skyrl_nb.cluster.kube import EksTokenSource

    source = kube._token
    if isinstance(source, EksTokenSource):
        user: dict[str, Any] = {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": sys.executable,
            "args": ["-m", "skyrl_nb.cluster.kube", "token", source.eks_cluster, region or source.region],
            "interactiveMode": "Never"}}
    else:
        user = {"token": kube.bearer() or ""}
    cluster: dict[str, Any] = {"server": kube.server}
    if kube._ca_data:
        cluster["certificate-authority-data"] = kube._ca_data
    config = {"apiVersion": "v1", "kind": "Config", "current-context": "skyrl-nb",
              "clusters": [{"name": "eks", "cluster": cluster}], "users": [{"name": "skyrl-nb", "user": user}],
              "contexts": [{"name": "skyrl-nb", "context": {"cluster": "eks", "user": "skyrl-nb"}}]}
    path = Path(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    return path


@contextlib.contextmanager
def kubeconfig_env(path: str | os.PathLike[str]) -> Iterator[None]:
    """``KUBECONFIG=path`` for the duration (one holder at a time), then what it was."""
    with _ENV_LOCK:
        old = os.environ.get("KUBECONFIG")
        os.environ["KUBECONFIG"] = str(path)
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("KUBECONFIG", None)
            else:
                os.environ["KUBECONFIG"] = old


@functools.cache
def hyperpod_cluster_class() -> type:
    """The `Cluster` subclass a `HyperPodRayCluster` connects to (made on first use: base imports Ray's client)."""
    from skyrl_nb.cluster.base import Cluster

    class HyperPodCluster(Cluster):
        """A :class:`~skyrl_nb.cluster.base.Cluster` on a KubeRay head on HyperPod, through a port-forward or the
        Ray Endpoint Operator's endpoint; ``shutdown()`` also closes the tunnel (the RayCluster keeps running)."""

        port_forward: Any = None
        raycluster: Any = None
        #: For an endpoint (``sagemaker_ray://``) address: the kubeconfig AWS's toolkit reads.
        kubeconfig: Path | None = None

        @property
        def client(self) -> Any:
            """Ray's job client; for an endpoint it is made with ``KUBECONFIG`` at this cluster's kubeconfig."""
            if self._client_obj is None and self.kubeconfig is not None:
                with kubeconfig_env(self.kubeconfig):
                    return super().client
            return super().client

        def shutdown(self) -> None:
            super().shutdown()
            if self.port_forward is not None:
                self.port_forward.close()

        def prepare(self, config: Any, **kwargs: Any) -> Any:
            """`Cluster.prepare`, with ``run.prometheus_port`` set to the port the head pod's scrape
            annotations name when the config leaves it unset."""
            cfg = super().prepare(config, **kwargs)
            if cfg.run.prometheus_port is None:
                from skyrl_core.config import check_config

                cfg = check_config(cfg, {"run.prometheus_port": ENGINE_METRICS_PORT})
            return cfg

    HyperPodCluster.__module__ = __name__
    return HyperPodCluster


def connect_endpoint(rc: Any, *, verify: bool | str = True) -> Any:
    """A HyperPodCluster on ``rc``'s endpoint (``sagemaker_ray://<name>/<namespace>`` through AWS's toolkit),
    with a kubeconfig for ``rc.kube`` in a private folder; no port-forward, no Ray token here."""
    from skyrl_nb.cluster.hyperpod_aws import require_sagemaker_ray

    address = endpoint_address(rc.name, rc.namespace)
    require_sagemaker_ray(address)
    folder = tempfile.mkdtemp(prefix="skyrl-nb-kube-")
    region = rc._info.region if rc._info is not None else rc.region
    cluster = hyperpod_cluster_class()(address, name=rc.name, dashboard_url=address, verify=verify)
    cluster.kubeconfig = write_kubeconfig(rc.kube, Path(folder) / "config", region=region)
    cluster.raycluster = rc
    return cluster
